"""`Route`: one entry of the route table (routes.py), apart so that the table's modules stay small."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from aiohttp import web
from marshmallow import Schema

from cms.api.ratelimit import RateLimit
from cms.services.access import Policy

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class Route:
    """One endpoint: method, path, handler, who may call it and what the API explorer shows of it.

    `policy`: who may call it (`access.Policy`: PUBLIC, OPTIONAL, PRINCIPAL, ADMIN_USER, COLLECTION_USER,
    ADMIN), enforced before the handler runs and documented as its `security`; `rate_limit`: GENERAL (the
    per-IP limit) or EXEMPT (health, docs). The auth endpoints' own limits, keyed on body fields, are
    counted in their handlers.
    `body`/`query`/`response` are marshmallow schema classes; `status` is the success status;
    `upload_field` names the file field of a multipart body, `form_fields` the other (required, text) fields
    it must carry and `optional_form_fields` those it may; `record_form`: the JSON body may also come as a
    record's multipart/form-data form (`data` and file parts, decisions.md: Files in records); `produces` the
    success media type; `failure` the schema of a 400 answer that carries more than the error model (a
    batch's `failed`); `errors` the error statuses it answers beside the usual ones, with what they mean
    (409, 413)."""

    method: str
    path: str
    handler: Handler
    summary: str
    tag: str
    policy: Policy = Policy.PUBLIC
    rate_limit: RateLimit = RateLimit.GENERAL
    body: type[Schema] | None = None
    query: type[Schema] | None = None
    response: type[Schema] | None = None
    many: bool = False
    status: int = 200
    in_docs: bool = True
    upload_field: str | None = None  # multipart/form-data body with this file field
    form_fields: tuple[str, ...] = ()
    optional_form_fields: tuple[str, ...] = ()
    record_form: bool = False  # also takes a record's values and files as multipart/form-data
    produces: str = "application/json"
    failure: type[Schema] | None = None
    errors: tuple[tuple[int, str], ...] = ()
