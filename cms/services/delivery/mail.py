"""Emails the service sends: rendered from text and HTML templates, queued for the worker.

Messages: email verification, password reset, email-change confirmation, the notice of a changed
address (to the old one) and OTP login code.

Templates live in `cms/templates/<name>.txt` and `<name>.html` (string.Template syntax,
`$link`, `$app_name`, `$code`); values are HTML-escaped in the HTML part.
"""

from __future__ import annotations

import html
from functools import cache
from importlib import resources
from string import Template
from urllib.parse import urlencode

from cms.jobs import EmailMessage, JobQueue

SUBJECTS = {
    "verify_email": "Verify your email address",
    "password_reset": "Reset your password",
    "email_change": "Confirm your new email address",
    "email_changed": "Your email address was changed",
    "otp": "Your login code",
}


@cache
def _template(filename: str) -> Template:
    return Template(resources.files("cms.templates").joinpath(filename).read_text(encoding="utf-8"))


def render(name: str, to: str, values: dict[str, str]) -> EmailMessage:
    """Render template `name` for `to`. Raises KeyError for an unknown template or missing value."""
    text = _template(f"{name}.txt").substitute(values)
    page = _template(f"{name}.html").substitute({k: html.escape(v) for k, v in values.items()})
    return EmailMessage(to=to, subject=SUBJECTS[name], text=text, html=page)


class Mailer:
    """Builds links under the public base URL and queues the emails."""

    def __init__(self, jobs: JobQueue, base_url: str, app_name: str = "CMS") -> None:
        self._jobs = jobs
        self._base_url = base_url.rstrip("/")
        self._app_name = app_name

    def link(self, page: str, **query: str) -> str:
        """A link to one of the small browser pages, e.g. `<base>/_/verify-email?token=...`."""
        return f"{self._base_url}/_/{page}?{urlencode(query)}"

    async def send(self, name: str, to: str, **values: str) -> None:
        """Render template `name` with `values` (plus `app_name`) and queue it for `to`."""
        await self._jobs.enqueue_email(render(name, to, {"app_name": self._app_name, **values}))

    async def send_verification(self, to: str, token: str, collection: str | None = None) -> None:
        """The email-verification message; the link carries the raw one-time token."""
        query = {"token": token, **({"collection": collection} if collection else {})}
        await self.send("verify_email", to, link=self.link("verify-email", **query))

    async def send_password_reset(self, to: str, token: str) -> None:
        """The password-reset message: a link to `/_/reset-password?token=...` (valid 1 hour). The
        token's audience tells the API which user system it belongs to, so the link needs no more."""
        await self.send("password_reset", to, link=self.link("reset-password", token=token))

    async def send_email_change(self, to: str, token: str, collection: str | None) -> None:
        """The email-change confirmation, sent to the new address: a link to
        `/_/confirm-email-change?token=...&collection=<name>` (no `collection` for the admin table)."""
        query = {"token": token, **({"collection": collection} if collection else {})}
        await self.send("email_change", to, link=self.link("confirm-email-change", **query))

    async def send_email_changed(self, to: str, new_email: str) -> None:
        """The notice to the old address `to` that the account's address is now `new_email`."""
        await self.send("email_changed", to, new_email=new_email)

    async def send_otp(self, to: str, code: str) -> None:
        """The OTP login message carrying the 6-digit `code` (valid 10 minutes)."""
        await self.send("otp", to, code=code)
