"""Batch writes: up to `batch_max_requests` record creates, changes and deletes in one MongoDB
transaction (decisions.md: Batch writes).

`BatchService.run` takes the caller's Principal and the requests as the API parsed them
(`BatchRequest`), opens one event unit in a transaction (`EventBus.unit(transactions)`) and runs each
request, in order, through the same `RecordService` method its REST route calls: the same rules, the
same validation, the same one writer (`RecordWriter`, whose own units nest into the batch's, whose
driver calls join the batch's session, and whose creates are never grouped inside it). A later
request therefore reads what an earlier one wrote. A run of consecutive creates into one collection
is one step (`RecordWriter.create_all`): the collection is looked up once, each create is checked
and validated as alone, then the run is stored by one ordered insert (a unique clash stops it at
the clashing create, whose index and answer are the batch's), guarded and emitted once. The first
request that fails (a CmsError) ends the batch: the transaction aborts, the events held so far are
dropped, and the batch answers `BatchFailed`, 400 with `failed: {index, status, body}` where `body`
is the error the request would have got alone (`CmsError.to_body`, the one rendering of the error
model). When every request succeeds the transaction commits, then the events go out, one per record
written.

A server without multi-document transactions (a standalone mongod; `Capabilities.transactions`,
detected by trying) cannot hold the all-or-nothing promise: every batch is refused there with 400
`bad_request` saying batches need a replica set.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from cms.errors import BadRequest, CmsError, ValidationFailed
from cms.models import Principal
from cms.services import access as actions
from cms.services.access import Access, check
from cms.services.content.record_reads import Presenter
from cms.services.content.record_writer import CreateFailed, RecordWriter
from cms.services.content.records import RecordService
from cms.services.delivery.events import EventBus
from cms.services.operations.settings import SettingsService
from cms.services.representation.record_view import FULL, RecordView
from cms.store.transactions import Transactions

DEFAULT_MAX_REQUESTS = 50
"""Requests one batch may hold when no `batch_max_requests` setting is at hand."""
NO_TRANSACTIONS = ("Batches need a MongoDB replica set (multi-document transactions); "
                   "this database server has none, so no batch can run")
"""The `detail` of the 400 every batch gets on a server without transactions."""


@dataclass(frozen=True)
class BatchRequest:
    """One request of a batch, as the API parsed it: `action` is `access.CREATE` (POST
    `.../records`), `access.UPDATE` (PATCH `.../records/{id}`) or `access.DELETE` (DELETE
    `.../records/{id}`) on collection `collection_name`; `record_id` for update and delete; `data`
    the object of field values of a create or update (as `{"data": ...}` alone). `refusal`: the
    answer the request gets without running (a method or path a batch may not hold, a body that
    does not validate); it fails the batch when its turn comes, so the first failure reported is
    the first in request order. `view`: how its answer shows the record (`?expand=`, `?fields=`)."""

    action: str
    collection_name: str = ""
    record_id: str | None = None
    data: Any = None
    refusal: CmsError | None = None
    view: RecordView = FULL


@dataclass(frozen=True)
class BatchAnswer:
    """The answer one request got: its HTTP `status` (201, 200 or 204) and its JSON `body` (the
    record; None for a delete)."""

    status: int
    body: dict[str, Any] | None


class BatchFailed(BadRequest):
    """400 `bad_request`: request `index` (from 0) of the batch failed with `error`, so nothing was
    changed. The body adds `failed: {index, status, body}`, `body` being `error` as the request
    alone would have been answered (`{detail, code[, errors]}`)."""

    def __init__(self, index: int, error: CmsError) -> None:
        super().__init__(f"Request {index} of the batch failed ({error.status} {error.code}); nothing was changed")
        self.failed: dict[str, Any] = {"index": index, "status": error.status, "body": error.to_body()}

    def to_body(self) -> dict[str, Any]:
        """`{detail, code, failed}`."""
        return {**super().to_body(), "failed": self.failed}


class BatchService:
    """Runs batches of record writes as one transaction. `records`: the service the REST routes
    call; `events`: the bus whose unit holds the batch's events until the commit; `transactions`:
    the database's transactions (None or not `enabled`: no batch can run); `settings`: for
    `batch_max_requests` (None: DEFAULT_MAX_REQUESTS); `writer`: the process's one record writer,
    which stores each run of creates."""

    def __init__(self, records: RecordService, events: EventBus, transactions: Transactions | None,
                 settings: SettingsService | None = None, *, writer: RecordWriter) -> None:
        self._records = records
        self._writer = writer
        self._events = events
        self._transactions = transactions
        self._settings = settings

    async def max_requests(self) -> int:
        """How many requests one batch may hold (the `batch_max_requests` setting, 1..1,000)."""
        if self._settings is None:
            return DEFAULT_MAX_REQUESTS
        return int((await self._settings.values())["batch_max_requests"])

    async def check(self, count: int) -> None:
        """Whether a batch of `count` requests may run here, before any of it runs. Raises
        ValidationFailed (422, `errors: {"requests": [message]}`) for no request or more than
        `max_requests()`, then BadRequest (NO_TRANSACTIONS) when the server has no transactions."""
        limit = await self.max_requests()
        if count < 1 or count > limit:
            message = ("At least one request is required." if count < 1
                       else f"At most {limit} requests per batch; {count} given.")
            raise ValidationFailed(f"Invalid requests: {message}", errors={"requests": [message]})
        if self._transactions is None or not self._transactions.enabled:
            raise BadRequest(NO_TRANSACTIONS)

    async def run(self, principal: Principal | None, requests: Sequence[BatchRequest]) -> list[BatchAnswer]:
        """Run `requests` in order, as `principal` (None: no credentials), in one transaction; returns
        each request's answer, in order, once the transaction committed (the events of the records
        written go out after that, one per write). Raises what `check` raises before anything runs,
        BatchFailed for the first request that fails (nothing was changed, no event went out), or
        BadRequest when the commit met a concurrent write ("retry")."""
        await self.check(len(requests))
        answers: list[BatchAnswer] = []
        async with self._events.unit(self._transactions):
            for start, run in runs(requests):
                try:
                    if _creates(run[0]):
                        answers.extend(await self._create_all(principal, run))
                    else:
                        answers.append(await self._run_one(principal, run[0]))
                except CreateFailed as exc:
                    raise BatchFailed(start + exc.index, exc.error) from None
                except CmsError as exc:
                    raise BatchFailed(start, exc) from None
        return answers

    async def _create_all(self, principal: Principal | None, run: Sequence[BatchRequest]) -> list[BatchAnswer]:
        """A run of creates into one collection (`runs`), as `RecordService.create_in` would make
        each: the collection looked up once, one `RecordWriter.create_all`. Raises what the look-up
        raises (the run's first create fails) or CreateFailed (index within the run)."""
        collection, epoch = await self._records.writable_for_new_records(run[0].collection_name)
        if collection.drafts:  # working copies (no events), one at a time, in the transaction
            answers = []
            for index, request in enumerate(run):
                try:
                    present = await self._records.presenter(request.collection_name, request.view, principal)
                    answers.append(BatchAnswer(201, await present(await self._records.create_in(
                        principal, collection, epoch, request.data))))
                except CmsError as exc:
                    raise CreateFailed(index, exc) from None
            return answers

        def rule(data: Any) -> Access:
            create = check(principal, collection, actions.CREATE, data if isinstance(data, dict) else None)
            create.require()
            return create

        # how each answer is shown (its own `expand`/`fields`), asked before anything is written: a
        # bad path fails its own request, after the creates before it (the first failure in order)
        presents: list[Presenter] = []
        refused: CmsError | None = None
        for request in run:
            try:
                presents.append(await self._records.presenter(request.collection_name, request.view, principal))
            except CmsError as exc:
                refused = exc
                break
        ran = run[:len(presents)]
        records = await self._writer.create_all(collection, [r.data for r in ran], rule, epoch=epoch,
                                                locales=[r.view.locale for r in ran]) if presents else []
        if refused is not None:
            raise CreateFailed(len(presents), refused)
        return [BatchAnswer(201, await present(record)) for present, record in zip(presents, records, strict=True)]

    async def _run_one(self, principal: Principal | None, request: BatchRequest) -> BatchAnswer:
        """One request other than a create, through the method its REST route calls; raises what
        that raises."""
        if request.refusal is not None:
            raise request.refusal
        name = request.collection_name
        if request.record_id is None:
            raise BadRequest("A record id is required")
        if request.action == actions.UPDATE:
            present = await self._records.presenter(name, request.view, principal)
            return BatchAnswer(200, await present(await self._records.update(principal, name, request.record_id,
                                                                             request.data, locale=request.view.locale)))
        if request.action == actions.DELETE:
            await self._records.delete(principal, name, request.record_id)
            return BatchAnswer(204, None)
        raise BadRequest(f"Unknown batch action {request.action!r}")


def runs(requests: Sequence[BatchRequest]) -> list[tuple[int, list[BatchRequest]]]:
    """`requests` cut into steps, in order, as (index of the first, requests): each run of
    consecutive creates into one collection (none refused) is one step, every other request a step
    of its own."""
    steps: list[tuple[int, list[BatchRequest]]] = []
    for index, request in enumerate(requests):
        last = steps[-1][1][-1] if steps else None
        if (last is not None and _creates(request) and _creates(last)
                and last.collection_name == request.collection_name):
            steps[-1][1].append(request)
        else:
            steps.append((index, [request]))
    return steps


def _creates(request: BatchRequest) -> bool:
    """Whether `request` is a create that runs (not refused before its turn)."""
    return request.action == actions.CREATE and request.refusal is None
