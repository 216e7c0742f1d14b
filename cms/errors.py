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
    │   ├── OtpDisabled       403 otp_disabled
    │   └── CorsRefused       403 cors_origin_not_allowed  (a browser origin CORS_ORIGINS does not list)
    ├── NotFound              404 not_found
    ├── MethodNotAllowed      405 method_not_allowed
    ├── Conflict              409 conflict        (a schema apply against another hash, or beside another)
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

    def __init_subclass__(cls, *, status: int | None = None, code: str | None = None,
                          detail: str | None = None, **kwargs: Any) -> None:
        """A subclass fixes what differs from its parent in its class line:
        `class NotFound(CmsError, status=404, code="not_found", detail="Not found")`."""
        super().__init_subclass__(**kwargs)
        if status is not None:
            cls.status = status
        if code is not None:
            cls.code = code
        if detail is not None:
            cls.default_detail = detail

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


class BadRequest(CmsError, status=400, code="bad_request", detail="Bad request"):
    """The request is malformed (bad JSON, bad query parameter)."""


class AlreadyExists(BadRequest, code="already_exists", detail="Already exists"):
    """A unique value (email, collection name, unique field) is taken."""


class WriteConflict(BadRequest, detail="The records were changed by another request; retry"):
    """A transaction lost a write conflict with a concurrent one (nothing of it was committed); the
    same answer as any BadRequest, told apart by callers that retry (a publish sees the winner's result)."""


class InvalidFilter(BadRequest, code="invalid_filter", detail="Invalid filter"):
    """A `filter` or `sort` expression does not parse or names an unknown field."""


class TokenInvalid(BadRequest, code="token_invalid", detail="The token is invalid or has already been used"):
    """A one-time token (verification, reset, email change) is unknown or already used."""


class TokenExpired(BadRequest, code="token_expired", detail="The token has expired"):
    """A one-time token is past its validity."""


class OtpInvalid(BadRequest, code="otp_invalid", detail="The code is invalid or has expired"):
    """An OTP code is wrong, expired, used or voided by too many wrong tries."""


class Unauthorized(CmsError, status=401, code="unauthorized", detail="Authentication required"):
    """No credential, or one that is not valid here (expired, revoked, wrong type or audience)."""


class InvalidCredentials(Unauthorized, code="invalid_credentials", detail="Invalid email or password"):
    """Login failed; the same for an unknown email and a wrong password."""


class Forbidden(CmsError, status=403, code="forbidden", detail="You do not have permission to do this"):
    """A valid principal that lacks the right."""


class OtpDisabled(Forbidden, code="otp_disabled", detail="OTP login is disabled for this collection"):
    """OTP login is switched off for the collection."""


class CorsRefused(Forbidden, code="cors_origin_not_allowed",
                  detail="This origin is not allowed to call the API from a browser"):
    """A cross-origin request (or its preflight) from an origin that `CORS_ORIGINS` does not list
    (cms.api.cors): `detail` names the origin and the allowed ones."""


class NotFound(CmsError, status=404, code="not_found", detail="Not found"):
    """The resource does not exist or is not visible to the caller."""


class MethodNotAllowed(CmsError, status=405, code="method_not_allowed", detail="Method not allowed"):
    """The path exists but not with this method."""


class Conflict(CmsError, status=409, code="conflict", detail="Conflict"):
    """The request was made against a state that has changed since (a schema apply whose hash is not the
    current schema's), or collides with the same work running elsewhere (another schema apply)."""


class PayloadTooLarge(CmsError, status=413, code="payload_too_large", detail="Request body too large"):
    """The request body is over its limit (JSON 1 MiB)."""


class ValidationFailed(CmsError, status=422, code="validation_error", detail="Validation failed"):
    """Input does not satisfy a schema; `errors` maps field names to lists of messages."""


class RateLimited(CmsError, status=429, code="rate_limited", detail="Too many requests"):
    """Too many requests; `retry_after_s` feeds the `Retry-After` header."""

    def __init__(self, detail: str | None = None, *, retry_after_s: int = 60) -> None:
        super().__init__(detail)
        self.retry_after_s = retry_after_s


class InternalError(CmsError):
    """An unexpected failure; the body never carries internals."""


class ServiceUnavailable(CmsError, status=503, code="service_unavailable", detail="Service unavailable"):
    """A dependency (MongoDB, Redis) does not answer."""


class UriTooLong(CmsError, status=414, code="uri_too_long", detail="The request URI is too long"):
    """The request line (method, URL, version) is over the server's limit; the URL is not echoed."""


class RequestHeaderTooLarge(CmsError, status=431, code="request_header_too_large",
                            detail="The request headers are too large"):
    """A request header is over the server's size limit, or there are too many headers."""


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
