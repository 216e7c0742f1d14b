"""Multi-document transactions, joined implicitly: a repository passes `current_session()` to
its driver calls, so every write made inside `Transactions.begin()` by such a repository commits or
aborts together (the record change and its webhook outbox entries, issue 8)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import Any

from pymongo import AsyncMongoClient
from pymongo.errors import OperationFailure

from cms.errors import WriteConflict

_session: ContextVar[Any] = ContextVar("cms_mongo_session", default=None)


def current_session() -> Any:
    """The session of the transaction open in this task, or None (then calls run on their own)."""
    return _session.get()


class Transactions:
    """Opens transactions on `client` when the server supports them (`enabled`)."""

    def __init__(self, client: AsyncMongoClient[dict[str, Any]], *, enabled: bool) -> None:
        self._client = client
        self.enabled = enabled

    @asynccontextmanager
    async def begin(self) -> AsyncIterator[None]:
        """Run the block in one transaction: committed when the block ends, aborted when it raises.
        Without server support (`enabled` False) the block runs as is. A write conflict with a
        concurrent transaction raises WriteConflict (a BadRequest: "changed by another request; retry")."""
        if not self.enabled or _session.get() is not None:
            yield
            return
        async with self._client.start_session() as session:
            await session.start_transaction()
            token = _session.set(session)
            try:
                yield
                await session.commit_transaction()
            except OperationFailure as exc:
                if session.in_transaction:
                    await session.abort_transaction()
                if exc.has_error_label("TransientTransactionError"):
                    raise WriteConflict("The records were changed by another request; retry") from None
                raise
            except BaseException:
                if session.in_transaction:
                    await session.abort_transaction()
                raise
            finally:
                _session.reset(token)
