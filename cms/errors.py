"""The one error model of the service (decisions.md, Errors).

Every failure a client may see is a `CmsError` subclass that fixes the HTTP `status`
and the snake_case `code`; the API middleware renders it as `{"detail", "code"}`
(422 adds `errors: {field: [message, ...]}`). Anything else becomes a 500
`internal_error` whose body carries no internals.

    CmsError
    ├── BadRequest            400 bad_request
    │   ├── AlreadyExists     400 already_exists
    │   ├── InvalidFilter     400 invalid_filter
    │   ├── TokenInvalid      400 token_invalid   (one-time tokens: verification, reset)
    │   ├── TokenExpired      400 token_expired
    │   └── OtpInvalid        400 otp_invalid
    ├── Unauthorized          401 unauthorized
    │   └── InvalidCredentials 401 invalid_credentials
    ├── Forbidden             403 forbidden
    │   └── OtpDisabled       403 otp_disabled
    ├── NotFound              404 not_found
    ├── MethodNotAllowed      405 method_not_allowed
    ├── PayloadTooLarge       413 payload_too_large
    ├── UriTooLong            414 uri_too_long    (HTTP parser errors: cms.api.http_server)
    ├── ValidationFailed      422 validation_error
    ├── RateLimited           429 rate_limited
    ├── RequestHeaderTooLarge 431 request_header_too_large  (HTTP parser errors)
    ├── InternalError         500 internal_error
    └── ServiceUnavailable    503 service_unavailable
"""

from __future__ import annotations

from typing import Any


class CmsError(Exception):
    """Base of every client-visible error: `status` (HTTP) and `code` (snake_case string)."""

    status: int = 500
    code: str = "internal_error"
    default_detail: str = "Internal server error"

    def __init__(self, detail: str | None = None, *, errors: dict[str, Any] | None = None) -> None:
        self.detail = detail or self.default_detail
        self.errors = errors
        self.headers: dict[str, str] = {}  # extra response headers (e.g. X-RateLimit-*)
        super().__init__(self.detail)

    def to_body(self) -> dict[str, Any]:
        """The JSON body: `{"detail": str, "code": str}` plus `errors` when set."""
        body: dict[str, Any] = {"detail": self.detail, "code": self.code}
        if self.errors is not None:
            body["errors"] = self.errors
        return body


class BadRequest(CmsError):
    """The request is malformed (bad JSON, bad query parameter)."""

    status, code, default_detail = 400, "bad_request", "Bad request"


class AlreadyExists(BadRequest):
    """A unique value (email, collection name, unique field) is taken."""

    code, default_detail = "already_exists", "Already exists"


class InvalidFilter(BadRequest):
    """A `filter` or `sort` expression does not parse or names an unknown field."""

    code, default_detail = "invalid_filter", "Invalid filter"


class TokenInvalid(BadRequest):
    """A one-time token (verification, reset, email change) is unknown or already used."""

    code, default_detail = "token_invalid", "The token is invalid or has already been used"


class TokenExpired(BadRequest):
    """A one-time token is past its validity."""

    code, default_detail = "token_expired", "The token has expired"


class OtpInvalid(BadRequest):
    """An OTP code is wrong, expired, used or voided by too many wrong tries."""

    code, default_detail = "otp_invalid", "The code is invalid or has expired"


class Unauthorized(CmsError):
    """No credential, or one that is not valid here (expired, revoked, wrong type or audience)."""

    status, code, default_detail = 401, "unauthorized", "Authentication required"


class InvalidCredentials(Unauthorized):
    """Login failed; the same for an unknown email and a wrong password."""

    code, default_detail = "invalid_credentials", "Invalid email or password"


class Forbidden(CmsError):
    """A valid principal that lacks the right."""

    status, code, default_detail = 403, "forbidden", "You do not have permission to do this"


class OtpDisabled(Forbidden):
    """OTP login is switched off for the collection."""

    code, default_detail = "otp_disabled", "OTP login is disabled for this collection"


class NotFound(CmsError):
    """The resource does not exist or is not visible to the caller."""

    status, code, default_detail = 404, "not_found", "Not found"


class MethodNotAllowed(CmsError):
    """The path exists but not with this method."""

    status, code, default_detail = 405, "method_not_allowed", "Method not allowed"


class PayloadTooLarge(CmsError):
    """The request body is over its limit (JSON 1 MiB)."""

    status, code, default_detail = 413, "payload_too_large", "Request body too large"


class ValidationFailed(CmsError):
    """Input does not satisfy a schema; `errors` maps field names to lists of messages."""

    status, code, default_detail = 422, "validation_error", "Validation failed"


class RateLimited(CmsError):
    """Too many requests; `retry_after_s` feeds the `Retry-After` header."""

    status, code, default_detail = 429, "rate_limited", "Too many requests"

    def __init__(self, detail: str | None = None, *, retry_after_s: int = 60) -> None:
        super().__init__(detail)
        self.retry_after_s = retry_after_s


class InternalError(CmsError):
    """An unexpected failure; the body never carries internals."""


class ServiceUnavailable(CmsError):
    """A dependency (MongoDB, Redis) does not answer."""

    status, code, default_detail = 503, "service_unavailable", "Service unavailable"


class UriTooLong(CmsError):
    """The request line (method, URL, version) is over the server's limit; the URL is not echoed."""

    status, code, default_detail = 414, "uri_too_long", "The request URI is too long"


class RequestHeaderTooLarge(CmsError):
    """A request header is over the server's size limit, or there are too many headers."""

    status, code, default_detail = 431, "request_header_too_large", "The request headers are too large"


def flatten_errors(messages: Any, *, prefix: str = "", root_key: str = "_schema") -> dict[str, list[str]]:
    """Flatten marshmallow-style error messages into the 422 `errors` shape: `{key: [str, ...]}`.

    Nested dicts (nested schemas, list items keyed by index, `many=True` loads) become dotted keys:
    `{"0": {"name": ["Invalid."]}}` with `prefix="schema"` is `{"schema.0.name": ["Invalid."]}`.
    Messages found at the top (a bare list or string) go under `prefix`, or `root_key` when there is
    no prefix; a nested `_schema` key (marshmallow's "the object itself") names its parent
    (`{"0": {"_schema": [...]}}` -> `schema.0`). Non-string leaves are rendered with `str()`.
    Never raises."""
    flat: dict[str, list[str]] = {}

    def walk(node: Any, key: str) -> None:
        if isinstance(node, dict):
            for child_key, child in node.items():
                if child_key == "_schema" and key:  # marshmallow's "the object itself" key
                    walk(child, key)
                else:
                    walk(child, f"{key}.{child_key}" if key else str(child_key))
        elif isinstance(node, list | tuple):
            for item in node:
                walk(item, key)
        else:
            flat.setdefault(key or root_key, []).append(str(node))

    walk(messages, prefix)
    return flat
