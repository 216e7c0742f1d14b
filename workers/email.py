"""send_email job: deliver one rendered message over SMTP (aiosmtplib), or log it without SMTP_HOST."""

from __future__ import annotations

import logging
from email.message import EmailMessage as MimeMessage
from email.utils import formataddr, make_msgid
from typing import Any

import aiosmtplib
from arq import Retry

from cms.config import Config

log = logging.getLogger("cms.workers.email")

EMAIL_MAX_TRIES = 5


def email_retry_delay_s(attempt: int) -> int:
    """Backoff before retry `attempt` + 1 of a failed send: 5, 10, 20, 40 ... seconds, capped at 300."""
    return int(min(5 * 2 ** (attempt - 1), 300))


def build_mime(config: Config, message: dict[str, Any]) -> MimeMessage:
    """A multipart/alternative message (text and HTML) from a queued `EmailMessage` dict."""
    mime = MimeMessage()
    mime["From"] = formataddr((config.smtp_from_name, config.smtp_from_email))
    mime["To"] = message["to"]
    mime["Subject"] = message["subject"]
    mime["Message-ID"] = make_msgid(domain=config.smtp_from_email.rpartition("@")[2] or None)
    mime.set_content(message["text"])
    mime.add_alternative(message["html"], subtype="html")
    return mime


async def send_email(ctx: dict[str, Any], message: dict[str, Any]) -> str:
    """Send `message` ({to, subject, text, html}). Without SMTP_HOST it is logged instead
    (recipient, subject, text with its link). SMTP or network failures raise arq's Retry with
    backoff until EMAIL_MAX_TRIES attempts; the last failure is logged and re-raised."""
    config: Config = ctx["config"]
    if not config.smtp_host:
        log.info("email not sent (no SMTP_HOST): to=%s subject=%r\n%s", message["to"], message["subject"],
                 message["text"])
        return "logged"
    attempt = int(ctx.get("job_try", 1))
    try:
        await aiosmtplib.send(
            build_mime(config, message),
            hostname=config.smtp_host,
            port=config.smtp_port,
            username=config.smtp_user,
            password=config.smtp_password,
            start_tls=config.smtp_starttls,
            timeout=config.smtp_timeout_s,
        )
    except (aiosmtplib.SMTPException, OSError) as exc:
        if attempt >= EMAIL_MAX_TRIES:
            log.error("email to %s failed after %d attempts: %s", message["to"], attempt, exc)
            raise
        delay_s = email_retry_delay_s(attempt)
        log.warning("email to %s failed (attempt %d): %s; retrying in %d s", message["to"], attempt, exc, delay_s)
        raise Retry(defer=delay_s) from exc
    log.info("email sent: to=%s subject=%r", message["to"], message["subject"])
    return "sent"
