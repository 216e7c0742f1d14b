"""Time and identifiers: the one `utcnow()` and `new_id()` of the project.

Services take a `Clock` so tests can move time (token expiry, OTP validity) without sleeping.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    """A source of the current time: returns an aware UTC `datetime`."""

    def __call__(self) -> datetime:
        """The current time (aware, UTC)."""
        ...


def utcnow() -> datetime:
    """The current time as an aware UTC datetime, truncated to milliseconds (BSON precision)."""
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond // 1000 * 1000)


def new_id() -> str:
    """A new random UUID4 as a 36-character string: the id of every stored object."""
    return str(uuid.uuid4())
