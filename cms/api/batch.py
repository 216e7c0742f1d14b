"""Handler of `POST /api/v1/batch` (decisions.md: Batch writes) and the reading of each request in it.

A request's method and URL are read here, as the router would read them alone (the path's segments
percent-decoded), and its body is loaded with the schema of the records routes (`RecordWriteSchema`,
through `load_body`, as `parse_body` loads a body alone), so a bad request gets the answer it would
get alone. What a batch may not hold (another method or path, another query parameter than
`expand` and `fields`) is a 400 `validation_error` for that request, and a malformed `expand` or
`fields` the 400 `invalid_filter` it gets alone. Either way the request only fails the batch when its
turn comes (`BatchRequest.refusal`), so the failure reported is the first in request order. `expand`
and `fields` shape the request's answer as they would alone (decisions.md, Relations in one request).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from aiohttp import web

from cms.api.batch_schemas import BATCH_METHODS, RECORD_URLS, BatchRequestSchema, BatchSchema
from cms.api.guards import principal_of
from cms.api.http_server import MAX_REQUEST_LINE_BYTES
from cms.api.ratelimit import charge_general
from cms.api.responses import json_response
from cms.api.schemas import RecordWriteSchema
from cms.errors import CmsError, UriTooLong, ValidationFailed
from cms.services import access as actions
from cms.services.content.batch import BatchRequest
from cms.services.representation.record_view import view_of
from cms.web.context import load, load_body, parse_body, services

RECORD_URL = re.compile(r"^/api/v1/collections/(?P<collection>[^/{}]+)/records(?:/(?P<record_id>[^/{}]+))?$")
"""The paths a batch may write to (aiohttp's `{name}` matches `[^{}/]+` alike)."""
VIEW_PARAMETERS = frozenset({"expand", "fields", "locale"})
"""The query parameters a request may carry: how its answer shows the record, and the locale it writes."""
ACTIONS = {"POST": actions.CREATE, "PATCH": actions.UPDATE, "DELETE": actions.DELETE}

BATCH_BODY = BatchSchema()
BATCH_REQUEST = BatchRequestSchema()
RECORD_WRITE = RecordWriteSchema()


class UnsupportedRequest(CmsError):
    """400 `validation_error`: a request a batch may not hold (decisions.md: Batch writes)."""

    status, code, default_detail = 400, "validation_error", "A batch holds record writes only"


async def run_batch(request: web.Request) -> web.Response:
    """`POST /api/v1/batch`: 200 with `[{status, body}]` in request order, all in one transaction.
    The size is checked before anything runs (422), then every request after the first is counted
    against the caller's general rate limit (the middleware counted the batch as one; 429)."""
    principal = principal_of(request)
    items = (await parse_body(request, BATCH_BODY))["requests"]
    batch = services(request).batch
    await batch.check(len(items))
    await charge_general(request, len(items) - 1)
    answers = await batch.run(principal, [read_request(item) for item in items])
    return json_response([{"status": a.status, "body": a.body} for a in answers])


def read_request(item: Any) -> BatchRequest:
    """One item of `requests` as the BatchRequest it asks for, or one whose `refusal` is the answer it
    gets: UnsupportedRequest (not an object, a method or URL a batch may not hold), UriTooLong (a
    URL the server would not read alone), BadRequest or ValidationFailed (its body, as alone)."""
    try:
        return _read(item)
    except CmsError as exc:
        return BatchRequest(actions.CREATE, refusal=exc)


def _read(item: Any) -> BatchRequest:
    if not isinstance(item, dict):
        raise UnsupportedRequest("Each request must be an object {method, url, body}")
    try:
        fields = load(BATCH_REQUEST, item)
    except ValidationFailed as exc:
        raise UnsupportedRequest(f"Not a batch request: {exc.detail}", errors=exc.errors) from None
    method, url = fields["method"].upper(), fields["url"]
    if len(url) > MAX_REQUEST_LINE_BYTES:
        raise UriTooLong(f"The request line is longer than {MAX_REQUEST_LINE_BYTES} bytes")
    if method not in ACTIONS:
        raise _unsupported("method", f"Must be one of {', '.join(BATCH_METHODS)}.")
    parts = urlsplit(url)
    match = RECORD_URL.match(parts.path)
    if parts.scheme or parts.netloc or match is None or (match["record_id"] is None) != (method == "POST"):
        raise _unsupported("url", f"{method} {url[:200]} is not a record write; a batch holds POST {RECORD_URLS} "
                                  "without an id, PATCH and DELETE with one.")
    parameters = parse_qsl(parts.query, keep_blank_values=True)
    others = sorted({name for name, _ in parameters} - VIEW_PARAMETERS)
    if others:
        raise _unsupported("url", "Query parameters other than expand, fields and locale are refused: "
                                  f"{', '.join(others)}.")
    first = {name: value for name, value in reversed(parameters)}  # the first of repeats, as alone
    view = view_of(first.get("expand"), first.get("fields"), first.get("locale"))
    record_id = unquote(match["record_id"]) if match["record_id"] is not None else None
    action = ACTIONS[method]
    data = None if action == actions.DELETE else load_body(fields.get("body"), RECORD_WRITE)["data"]
    return BatchRequest(action, unquote(match["collection"]), record_id, data, view=view)


def _unsupported(field_name: str, message: str) -> UnsupportedRequest:
    return UnsupportedRequest(message, errors={field_name: [message]})
