"""Translate pymongo errors into `CmsError`, in this one place (STYLE rule 3)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from pymongo.errors import DuplicateKeyError, OperationFailure, PyMongoError, ServerSelectionTimeoutError

from cms.errors import AlreadyExists, InvalidFilter, ServiceUnavailable

log = logging.getLogger("cms.store")

QUERY_REFUSED_CODES = frozenset({2, 9, 51091, 51108, 292})
"""Server error codes that mean "this query is not acceptable", not "the server is broken":
BadValue (e.g. the embedded server's 1,000-character regex cap), FailedToParse, invalid regex
(51091, 51108) and a sort over the memory limit (292)."""


def duplicate_field(error: DuplicateKeyError) -> str | None:
    """The field name behind a duplicate-key error (first key of `keyPattern`), if the server says."""
    details = error.details or {}
    pattern = details.get("keyPattern") or {}
    if pattern:
        return str(next(iter(pattern)))
    return None


def already_exists(field_name: str | None, what: str = "value") -> AlreadyExists:
    """The 409 of a duplicate key on `field_name` (a unique field of a collection: named in
    `errors`; an internal key such as `_id` or `email`: named by `what` only)."""
    if field_name and field_name not in ("_id", "name_lower", "email"):
        return AlreadyExists(f"A record with this {field_name} already exists",
                             errors={field_name: ["Value must be unique"]})
    return AlreadyExists(f"This {what} already exists")


@asynccontextmanager
async def translate_errors(what: str = "value") -> AsyncIterator[None]:
    """Run a block of driver calls; DuplicateKeyError -> AlreadyExists (with `errors` naming the
    field), an unreachable server -> ServiceUnavailable. Other errors propagate (500)."""
    try:
        yield
    except DuplicateKeyError as exc:
        raise already_exists(duplicate_field(exc), what) from None
    except ServerSelectionTimeoutError:
        raise ServiceUnavailable("MongoDB is unavailable") from None
    except PyMongoError:
        raise


@asynccontextmanager
async def translate_query_errors() -> AsyncIterator[None]:
    """Run a read built from a client's filter, sort or search: a server refusal of the query
    (QUERY_REFUSED_CODES) -> InvalidFilter (400, the server's message logged, not returned), an
    unreachable server -> ServiceUnavailable. Other errors propagate (500)."""
    try:
        yield
    except OperationFailure as exc:
        if exc.code not in QUERY_REFUSED_CODES:
            raise
        log.info("query refused by the server (code %s): %s", exc.code, (exc.details or {}).get("errmsg", ""))
        raise InvalidFilter(
            "The database refused this filter, sort or search (a value may be too long or the sort too large); "
            "simplify it"
        ) from None
    except ServerSelectionTimeoutError:
        raise ServiceUnavailable("MongoDB is unavailable") from None
