"""The client's two failures: the API answered with an error (`CmsError`), or no answer came (`NetworkError`)."""

from __future__ import annotations

from typing import Any


class CmsError(Exception):
    """The API answered with an error status: its `{detail, code, errors?}` body, typed.

    `status` is the HTTP status (400..599); `code` the API's snake_case code (`validation_error`,
    `not_found`, `unauthorized`, ...; decisions.md, Errors); `detail` its message; `errors` the 422
    field errors `{field: [message, ...]}` (empty otherwise); `body` the whole decoded body (a batch
    failure's `failed: {index, status, body}` is there). An answer that is not the API's JSON error
    body keeps `code` `"http_<status>"` and its text, cut to 500 characters, as `detail`."""

    def __init__(self, status: int, code: str, detail: str, errors: dict[str, list[str]] | None = None,
                 body: dict[str, Any] | None = None) -> None:
        super().__init__(f"{status} {code}: {detail}")
        self.status = status
        self.code = code
        self.detail = detail
        self.errors: dict[str, list[str]] = errors or {}
        self.body: dict[str, Any] = body if body is not None else {"detail": detail, "code": code}


class NetworkError(Exception):
    """No answer from the service: a refused or dropped connection, or a time-out. `__cause__` is httpx's error."""
