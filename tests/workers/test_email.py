"""The send_email job: delivery over real SMTP, retries with backoff when SMTP is unreachable, and
logging instead of sending without SMTP_HOST (decisions.md, Running it: Without SMTP)."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest
from arq import Retry

from cms.runtime.embedded import free_port
from cms.services.delivery.mail import render
from tests.conftest import link_token, text_body
from workers.email import EMAIL_MAX_TRIES, build_mime, email_retry_delay_s, send_email
from workers.settings import build_worker

LINK = "http://cms.test/_/verify-email?token=abc_DEF-123"


def message(to: str = "someone@example.com") -> dict[str, str]:
    """A queued EmailMessage as the job receives it (JSON-safe dict)."""
    rendered = render("verify_email", to, {"app_name": "CMS", "link": LINK})
    return {"to": rendered.to, "subject": rendered.subject, "text": rendered.text, "html": rendered.html}


@pytest.mark.parametrize(
    "attempt, delay_s", [(1, 5), (2, 10), (3, 20), (4, 40), (5, 80), (7, 300), (20, 300)],
    ids=lambda v: str(v),
)
def test_email_retry_delay(attempt, delay_s):
    assert email_retry_delay_s(attempt) == delay_s


def test_build_mime_is_multipart_alternative(config):
    mime = build_mime(replace(config, smtp_from_name="Acme CMS", smtp_from_email="noreply@acme.test"), message())
    assert mime.get_content_type() == "multipart/alternative"
    parts = list(mime.iter_parts())
    assert [part.get_content_type() for part in parts] == ["text/plain", "text/html"]
    assert mime["From"] == "Acme CMS <noreply@acme.test>"
    assert mime["To"] == "someone@example.com"
    assert mime["Subject"] == "Verify your email address"
    assert mime["Message-ID"].endswith("@acme.test>")
    assert LINK in parts[0].get_content()
    assert f'href="{LINK}"' in parts[1].get_content()


def test_build_mime_escapes_nothing_twice_and_keeps_unicode(config):
    queued = {"to": "zoë@example.com", "subject": "Grüße", "text": "Hallo – ünïcode", "html": "<p>Grüße</p>"}
    mime = build_mime(config, queued)
    assert mime["Subject"] == "Grüße"
    parts = list(mime.iter_parts())
    assert parts[0].get_content().strip() == "Hallo – ünïcode"
    assert parts[1].get_content().strip() == "<p>Grüße</p>"


async def test_send_email_delivers_over_smtp(config, mailbox):
    result = await send_email({"config": config, "job_try": 1}, message("deliver@example.com"))
    assert result == "sent"
    received = mailbox.last_to("deliver@example.com")
    assert received["Subject"] == "Verify your email address"
    assert link_token(received) == "abc_DEF-123"


async def test_unreachable_smtp_retries_with_backoff_until_the_last_attempt(config, caplog):
    closed = replace(config, smtp_host="127.0.0.1", smtp_port=free_port())
    caplog.set_level(logging.WARNING, logger="cms.workers.email")
    for attempt in range(1, EMAIL_MAX_TRIES):
        with pytest.raises(Retry) as raised:
            await send_email({"config": closed, "job_try": attempt}, message())
        assert raised.value.defer_score == email_retry_delay_s(attempt) * 1000
    with pytest.raises(Exception) as failed:
        await send_email({"config": closed, "job_try": EMAIL_MAX_TRIES}, message())
    assert not isinstance(failed.value, Retry)
    failures = [r for r in caplog.records if "someone@example.com" in r.getMessage()]
    assert len(failures) == EMAIL_MAX_TRIES
    assert failures[-1].levelno == logging.ERROR
    # the message body (and its token) is never logged on failure
    assert all("abc_DEF-123" not in r.getMessage() for r in caplog.records)


async def test_without_smtp_host_the_email_is_logged_not_sent(config, mailbox, caplog):
    caplog.set_level(logging.INFO, logger="cms.workers.email")
    result = await send_email({"config": replace(config, smtp_host=None), "job_try": 1}, message("log@example.com"))
    assert result == "logged"
    assert mailbox.to("log@example.com") == []
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "log@example.com" in logged
    assert "Verify your email address" in logged
    assert LINK in logged


async def test_worker_without_smtp_host_logs_the_verification_link(client, config, services, mailbox, caplog):
    """End to end: register, then a worker with no SMTP_HOST logs the link a local user can follow."""
    caplog.set_level(logging.INFO, logger="cms.workers.email")
    response = await client.post("/api/v1/auth/register", json={"email": "local@example.com", "password": "password-1"})
    assert response.status == 201
    worker = build_worker(replace(config, smtp_host=None), services=services, burst=True, handle_signals=False,
                          poll_delay_s=0.01)
    try:
        await worker.main()
    finally:
        await worker.close()
    assert mailbox.to("local@example.com") == []
    logged = "\n".join(r.getMessage() for r in caplog.records if r.name == "cms.workers.email")
    assert "local@example.com" in logged
    assert "http://cms.test/_/verify-email?token=" in logged


async def test_worker_delivers_the_queued_email(client, run_jobs, mailbox):
    response = await client.post("/api/v1/auth/register",
                                 json={"email": "queued@example.com", "password": "password-1"})
    assert response.status == 201
    await run_jobs()
    assert "http://cms.test/_/verify-email?token=" in text_body(mailbox.last_to("queued@example.com"))
