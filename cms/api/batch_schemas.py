"""The shapes of `POST /api/v1/batch` (decisions.md: Batch writes): the body, each request in it, the
answers and the failure. They validate the body and, through apispec, document it (/docs)."""

from __future__ import annotations

from typing import Any

from marshmallow import Schema, ValidationError, fields

from cms.api.schemas import ErrorSchema

BATCH_METHODS = ("POST", "PATCH", "DELETE")
RECORD_URLS = "/api/v1/collections/{name}/records[/{id}]"

REQUESTS_EXAMPLE = [
    {"method": "POST", "url": "/api/v1/collections/posts/records", "body": {"data": {"title": "Hello"}}},
    {"method": "PATCH", "url": "/api/v1/collections/posts/records/6650c0ffee0000000000aaaa",
     "body": {"data": {"published": True}}},
    {"method": "DELETE", "url": "/api/v1/collections/comments/records/6650c0ffee0000000000bbbb"},
]
CREATED_EXAMPLE = {"id": "6650c0ffee0000000000cccc", "created": "2026-01-01T00:00:00.000Z",
                   "updated": "2026-01-01T00:00:00.000Z", "title": "Hello"}
FAILED_EXAMPLE = {"index": 1, "status": 404, "body": {"detail": "Record not found", "code": "not_found"}}


class BatchRequestSchema(Schema):
    """One request of a batch: what it would send alone."""

    method = fields.String(required=True, metadata={"enum": list(BATCH_METHODS), "description":
                           "POST (create), PATCH (change) or DELETE; anything else fails the batch with 400 "
                           "`validation_error` as this request's answer"})
    url = fields.String(required=True, metadata={"description":
                        f"`{RECORD_URLS}`: POST without an id, PATCH and DELETE with one; the query parameters "
                        "`expand` and `fields` shape the answer as alone, any other is refused"})
    body = fields.Raw(allow_none=True, metadata={"type": "object", "description":
                      "The JSON body the request would carry alone, `{\"data\": {...}}`; may be left out for DELETE"})


class RequestList(fields.List):  # type: ignore[type-arg]
    """A list whose items are kept as sent: each is loaded with BatchRequestSchema on its own, once the
    count is known to be within the limit, and a bad one is that request's answer (the document still
    shows the items' schema)."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> list[Any]:
        if not isinstance(value, list):
            raise ValidationError("Not a valid list.")
        return list(value)


class BatchSchema(Schema):
    """The body of `POST /api/v1/batch`."""

    requests = RequestList(fields.Nested(BatchRequestSchema), required=True, metadata={
        "description": "1 to `batch_max_requests` (default 50) requests, run in order in one transaction; "
                       "more is 422 `validation_error` before anything runs",
        "example": REQUESTS_EXAMPLE})


class BatchAnswerSchema(Schema):
    """The answer one request got, in request order."""

    status = fields.Integer(required=True, metadata={"description": "201 (created), 200 (changed) or 204 (deleted)",
                                                      "example": 201})
    body = fields.Dict(required=True, allow_none=True, metadata={
        "description": "The record, as the request alone would answer; null for a delete",
        "example": CREATED_EXAMPLE})


class BatchFailedSchema(Schema):
    """The first request that failed."""

    index = fields.Integer(required=True, metadata={"description": "Its position in `requests`, from 0"})
    status = fields.Integer(required=True, metadata={"description": "The status it would have got alone"})
    body = fields.Nested(ErrorSchema, required=True, metadata={"description": "The error it would have got alone"})


class BatchFailureSchema(ErrorSchema):
    """400 `bad_request`: nothing was changed. `failed` names the first failing request; it is absent
    when the batch could not run at all (a server without transactions)."""

    failed = fields.Nested(BatchFailedSchema, metadata={"example": FAILED_EXAMPLE})
