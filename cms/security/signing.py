"""Webhook signatures: HMAC-SHA256 of the raw request body, keyed with the webhook's secret.

The one signer of the project: the delivery worker signs with `sign()`, receivers and tests check with `verify()`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

SIGNATURE_HEADER = "X-Webhook-Signature"
SIGNATURE_PREFIX = "sha256="


def sign(secret: str, body: bytes) -> str:
    """The `X-Webhook-Signature` value for `body`: "sha256=" + 64 lowercase hex characters.

    The HMAC-SHA256 is keyed with `secret`'s UTF-8 bytes and computed over the exact bytes sent."""
    digest = hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()
    return SIGNATURE_PREFIX + digest


def verify(secret: str, body: bytes, header_value: str) -> bool:
    """True when `header_value` is the signature `sign(secret, body)`, compared in constant time.

    False, never raises, for a missing "sha256=" prefix, a wrong digest or any other text."""
    if not header_value.startswith(SIGNATURE_PREFIX):
        return False
    return hmac.compare_digest(sign(secret, body).encode("utf-8"), header_value.encode("utf-8"))


STANDARD_SIGNATURE_VERSION = "v1"


def sign_standard(secret: str, message_id: str, timestamp_s: int, body: bytes) -> str:
    """The Standard Webhooks `webhook-signature` value: "v1," + base64 of the HMAC-SHA256 of
    "<message_id>.<timestamp_s>.<body>", keyed with `secret`'s UTF-8 bytes. Receivers verify it with
    the `standardwebhooks` libraries, given the key "whsec_" + base64(secret UTF-8 bytes)."""
    signed = message_id.encode("utf-8") + b"." + str(timestamp_s).encode("ascii") + b"." + body
    digest = hmac.new(secret.encode("utf-8"), signed, hashlib.sha256).digest()
    return f"{STANDARD_SIGNATURE_VERSION},{base64.b64encode(digest).decode('ascii')}"


def standard_key(secret: str) -> str:
    """The `whsec_` key of `secret` for the Standard Webhooks libraries: "whsec_" + base64(UTF-8)."""
    return "whsec_" + base64.b64encode(secret.encode("utf-8")).decode("ascii")
