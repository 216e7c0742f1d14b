"""Scenario tables for the pure parts of webhooks: the SSRF address rule, Standard Webhooks
signatures, the retry backoff and attempt ids."""

from __future__ import annotations

import base64
import hashlib
import hmac

import pytest
from standardwebhooks.webhooks import Webhook as StandardWebhook

from cms.security.addresses import is_public_address
from cms.security.signing import sign_standard, standard_key
from cms.services.delivery.webhook_outbox import attempt_id, retry_delay_s


@pytest.mark.parametrize("address, public", [
    ("8.8.8.8", True), ("2606:4700:4700::1111", True), ("93.184.216.34", True),
    ("127.0.0.1", False), ("127.8.9.10", False), ("::1", False), ("10.0.0.1", False), ("172.16.5.4", False),
    ("192.168.1.1", False), ("169.254.169.254", False), ("fe80::1%eth0", False), ("fc00::1", False),
    ("0.0.0.0", False), ("::", False), ("224.0.0.1", False), ("100.64.0.1", False), ("240.0.0.1", False),
    ("::ffff:127.0.0.1", False), ("::ffff:8.8.8.8", True), ("not-an-ip", False), ("", False),
])
def test_is_public_address(address: str, public: bool) -> None:
    assert is_public_address(address) is public


def test_standard_signature_matches_the_reference_library() -> None:
    secret, msg_id, timestamp, body = "s3cret", "msg_1", 1_700_000_000, b'{"a":1}'
    expected = StandardWebhook(standard_key(secret)).sign(msg_id, _datetime(timestamp), body.decode())
    assert sign_standard(secret, msg_id, timestamp, body) == expected
    digest = hmac.new(secret.encode(), b"msg_1.1700000000." + body, hashlib.sha256).digest()
    assert sign_standard(secret, msg_id, timestamp, body) == "v1," + base64.b64encode(digest).decode()
    assert sign_standard(secret, msg_id, timestamp + 1, body) != expected
    assert standard_key("ab") == "whsec_YWI="


def _datetime(timestamp: int):
    from datetime import UTC, datetime
    return datetime.fromtimestamp(timestamp, tz=UTC)


@pytest.mark.parametrize("attempt, delay", [(1, 1), (2, 2), (3, 4), (4, 8), (5, 16), (6, 30), (10, 30)])
def test_retry_delay_s(attempt: int, delay: int) -> None:
    assert retry_delay_s(attempt) == delay


def test_attempt_ids() -> None:
    assert attempt_id("d1", 1) == "d1"
    assert attempt_id("d1", 2) == attempt_id("d1", 2) != attempt_id("d1", 3)
    assert attempt_id("d1", 2) != attempt_id("d2", 2)
