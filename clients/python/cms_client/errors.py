"""The client's failures, named as the TypeScript client's: the API answered with an error (`CmsError`; a failed
batch is a `BatchError`, which also says which request failed), or no answer came (`CmsNetworkError`)."""

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


class BatchError(CmsError):
    """A batch that stored nothing: `failed` is `{index (from 0), status, body}`, the answer the first failing
    request would have got alone; None when the whole batch was refused (too many requests, no transactions)."""

    def __init__(self, status: int, code: str, detail: str, errors: dict[str, list[str]] | None = None,
                 body: dict[str, Any] | None = None) -> None:
        super().__init__(status, code, detail, errors, body)
        failed = self.body.get("failed")
        self.failed: dict[str, Any] | None = failed if isinstance(failed, dict) else None

    @classmethod
    def of(cls, error: CmsError) -> BatchError:
        """The BatchError of the error answer to a batch."""
        return cls(error.status, error.code, error.detail, error.errors, error.body)


class CmsNetworkError(Exception):
    """No answer from the service: a refused or dropped connection, or a time-out. `__cause__` is httpx's error."""
