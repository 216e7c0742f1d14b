"""Translate pymongo errors into `CmsError`, in this one place (STYLE rule 3)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from pymongo.errors import DuplicateKeyError, PyMongoError, ServerSelectionTimeoutError

from cms.errors import AlreadyExists, ServiceUnavailable


def duplicate_field(error: DuplicateKeyError) -> str | None:
    """The field name behind a duplicate-key error (first key of `keyPattern`), if the server says."""
    details = error.details or {}
    pattern = details.get("keyPattern") or {}
    if pattern:
        return str(next(iter(pattern)))
    return None


@asynccontextmanager
async def translate_errors(what: str = "value") -> AsyncIterator[None]:
    """Run a block of driver calls; DuplicateKeyError -> AlreadyExists (with `errors` naming the
    field), an unreachable server -> ServiceUnavailable. Other errors propagate (500)."""
    try:
        yield
    except DuplicateKeyError as exc:
        field_name = duplicate_field(exc)
        if field_name and field_name not in ("_id", "name_lower", "email"):
            raise AlreadyExists(
                f"A record with this {field_name} already exists",
                errors={field_name: ["Value must be unique"]},
            ) from None
        raise AlreadyExists(f"This {what} already exists") from None
    except ServerSelectionTimeoutError:
        raise ServiceUnavailable("MongoDB is unavailable") from None
    except PyMongoError:
        raise
