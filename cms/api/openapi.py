"""The OpenAPI 3 document, built by apispec from the route table and its marshmallow schemas. Each
operation's `security` and its 401/403 answers come from the route's policy, the one the principal
middleware enforces (`guards.py`), so the document cannot drift from what is enforced."""

from __future__ import annotations

import re
from functools import cache
from typing import Any, assert_never

from aiohttp import web
from apispec import APISpec
from apispec.ext.marshmallow import MarshmallowPlugin
from apispec.ext.marshmallow.openapi import OpenAPIConverter
from marshmallow import fields

from cms import __version__
from cms.api.responses import json_response
from cms.api.route import Route
from cms.api.routes import ROUTES
from cms.api.schemas import ErrorSchema
from cms.services.access import API_KEY_PATHS, Policy
from cms.services.content.value_fields import IsoDateTime
from cms.services.operations.backups import BACKUP_NAME
from cms.services.representation.base import Rendered, Timestamp

PATH_PARAM = re.compile(r"{(\w+)}")
PATH_PARAM_PATTERNS = {"filename": f"^{BACKUP_NAME.pattern}$"}
"""Path parameters whose form the service checks (400 otherwise), by name."""
ERROR_STATUSES = {400: "Bad request", 401: "Unauthorized", 403: "Forbidden", 404: "Not found",
                  422: "Validation error", 429: "Rate limit exceeded"}
BEARER: dict[str, list[str]] = {"bearerAuth": []}
API_KEY: dict[str, list[str]] = {"apiKeyAuth": []}
ANONYMOUS: dict[str, list[str]] = {}


EVENT_STREAM = "text/event-stream"
SSE_EVENT: dict[str, Any] = {
    "type": "object", "description": "One server-sent event (decisions.md, Realtime): `connect` (data "
    "`{client_id}`), `resync` (reload your data), or an event named by the topic as subscribed with data "
    "`{action: create|update|delete, record}`; every event has an `id` (resume with `Last-Event-ID`)",
    "properties": {"event": {"type": "string"}, "id": {"type": "string"},
                   "data": {"type": "string", "description": "JSON"}, "retry": {"type": "integer"}},
}
"""The schema of each event of a `text/event-stream` answer."""
RECORD_FORM: dict[str, Any] = {
    "type": "object",
    "description": "A record's values and files in one request, all or nothing (decisions.md, Files in records, "
    "thumbnails and file tokens): the part `data` holds the JSON object a JSON write's `data` holds (on a change, "
    "`<field>-`: file ids to take out of a file field); each other part is a file of the file field it is named "
    "after (repeated for several; they replace the field's files), or on a change `<field>+` (added after the "
    "stored ones). Each file is checked against its field's `mime_types` (on the bytes' signature) and `max_size` "
    "(422 naming the field) and `max_upload_mb` (413); at most 100 files, 1 GiB in all",
    "properties": {"data": {"type": "string", "description": "JSON: the field values",
                            "example": '{"title": "Holidays"}'}},
    "additionalProperties": {"oneOf": [{"type": "string", "format": "binary"},
                                       {"type": "array", "items": {"type": "string", "format": "binary"}}]},
}
"""The multipart/form-data body of a record create or change (`Route.record_form`)."""

def policy_docs(policy: Policy) -> tuple[list[dict[str, list[str]]] | None, str, str]:
    """What the document says of a route of `policy`: its `security` (None: public, no key) and the
    descriptions of its 401 and 403 answers."""
    match policy:
        case Policy.PUBLIC:
            return None, "Unauthorized (the endpoint's own check, e.g. a wrong password)", "Forbidden"
        case Policy.OPTIONAL:
            return ([ANONYMOUS, BEARER], "A credential that is not valid, or an anonymous caller the collection's "
                    "rule refuses", "The collection's rule refuses the caller, or an API key lacks the scope")
        case Policy.PRINCIPAL:
            return [BEARER], "No valid credential", "The caller may not do this"
        case Policy.ADMIN_USER:
            return [BEARER], "No valid access token of an admin-table user", "Forbidden (an API key)"
        case Policy.COLLECTION_USER:
            return [BEARER], "No valid access token of a user of this collection", "Forbidden (an API key)"
        case Policy.ADMIN:
            return [BEARER], "No valid credential", "Not an admin-table user with role admin"
        case Policy.METRICS:
            return ([BEARER], "No valid credential (an admin's access token, or METRICS_TOKEN when set)",
                    "Not an admin-table user with role admin")
        case _:
            assert_never(policy)


def _operation(route: Route) -> dict[str, Any]:
    operation: dict[str, Any] = {"summary": route.summary, "tags": [route.tag]}
    parameters: list[dict[str, Any]] = [
        {"in": "path", "name": name, "required": True, "schema": _path_schema(name)}
        for name in PATH_PARAM.findall(route.path)
    ]
    if route.query is not None:
        parameters.append({"in": "query", "schema": route.query})
    if parameters:
        operation["parameters"] = parameters
    if route.body is not None:
        operation["requestBody"] = {"required": True, "content": {"application/json": {"schema": route.body}}}
    if route.upload_field is not None:
        texts = (*route.form_fields, *route.optional_form_fields)
        upload = {"type": "object", "required": [route.upload_field, *route.form_fields],
                  "additionalProperties": False,
                  "properties": {**{name: {"type": "string", "minLength": 1} for name in texts},
                                 route.upload_field: {"type": "string", "format": "binary"}}}
        operation["requestBody"] = {"required": True, "content": {"multipart/form-data": {"schema": upload}}}
    if route.record_form:
        operation["requestBody"]["content"]["multipart/form-data"] = {"schema": RECORD_FORM}
    success: dict[str, Any] = {"description": "Success"}
    if route.produces == EVENT_STREAM:
        success["content"] = {EVENT_STREAM: {"schema": SSE_EVENT}}
    elif route.produces != "application/json":
        success["content"] = {route.produces: {"schema": {"type": "string"}}}
    elif route.response is not None:
        schema: Any = {"type": "array", "items": route.response} if route.many else route.response
        success["content"] = {"application/json": {"schema": schema}}
    security, unauthorized, forbidden = policy_docs(route.policy)
    descriptions = {**ERROR_STATUSES, 401: unauthorized, 403: forbidden, **dict(route.errors)}
    responses: dict[Any, Any] = {str(route.status): success}
    for status, text in descriptions.items():
        responses[str(status)] = {"description": text, "content": {"application/json": {"schema": "Error"}}}
    if route.failure is not None:
        responses["400"]["content"]["application/json"]["schema"] = route.failure
    operation["responses"] = responses
    if security is not None:
        if route.policy is not Policy.ADMIN_USER and route.policy is not Policy.COLLECTION_USER \
                and API_KEY_PATHS.match(route.path):
            security = [*security, API_KEY]  # an API key reaches records, files, batch and realtime only
        operation["security"] = security
    return operation


def _path_schema(name: str) -> dict[str, Any]:
    schema = {"type": "string"}
    if name in PATH_PARAM_PATTERNS:
        schema["pattern"] = PATH_PARAM_PATTERNS[name]
    return schema


def _rendered_property(self: OpenAPIConverter, field: fields.Field[Any], **kwargs: Any) -> dict[str, Any]:
    """apispec attribute function: a `Rendered` field is documented as its shape, or `oneOf` its shapes."""
    if not isinstance(field, Rendered):
        return {}
    refs = [self.resolve_nested_schema(shape) for shape in field.shapes]  # type: ignore[no-untyped-call]
    return refs[0] if len(refs) == 1 else {"oneOf": refs}


@cache
def openapi_document() -> dict[str, Any]:
    """The whole document as a dict (built once per process)."""
    marshmallow_plugin = MarshmallowPlugin()
    spec = APISpec(
        title="CMS API",
        version=__version__,
        openapi_version="3.0.3",
        plugins=[marshmallow_plugin],
        info={"description": "Headless CMS backend: collections, records, auth. Errors are `{detail, code}`."},
    )
    marshmallow_plugin.map_to_openapi_type(IsoDateTime, "string", "date-time")  # type: ignore[no-untyped-call]
    marshmallow_plugin.map_to_openapi_type(Timestamp, "string", "date-time")  # type: ignore[no-untyped-call]
    assert marshmallow_plugin.converter is not None  # set by APISpec(plugins=...)
    marshmallow_plugin.converter.add_attribute_function(_rendered_property)  # type: ignore[no-untyped-call]
    spec.components.security_scheme("bearerAuth", {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"})
    spec.components.security_scheme("apiKeyAuth", {
        "type": "apiKey", "in": "header", "name": "X-API-Key",
        "description": "An API key (`cms_...`; decisions.md, Identity and tokens): scope `read` for GET, "
                       "`write` for POST/PATCH/DELETE, on records, files, batch and realtime only"})
    spec.components.schema("Error", schema=ErrorSchema)
    paths: dict[str, dict[str, Any]] = {}
    for route in ROUTES:
        if route.in_docs:
            paths.setdefault(route.path, {})[route.method.lower()] = _operation(route)
    for path, operations in paths.items():
        spec.path(path=path, operations=operations)
    return spec.to_dict()


async def openapi_json(request: web.Request) -> web.Response:
    """GET /openapi.json: the OpenAPI 3 document of every route in `routes.ROUTES`."""
    return json_response(openapi_document())
