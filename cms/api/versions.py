"""Handlers of `/api/v1/collections/{collection_name}/records/{record_id}/versions` (decisions.md, Drafts,
versions and scheduled publishing: Versions)."""

from __future__ import annotations

import re

from aiohttp import web

from cms.api.guards import principal_of
from cms.api.records import record_view
from cms.api.responses import json_response
from cms.api.schemas import VersionListQuerySchema
from cms.errors import NotFound
from cms.services import representation as represent
from cms.web.context import parse_query, services

VERSION_LIST_QUERY = VersionListQuerySchema()
VERSION_NUMBER = re.compile(r"[1-9][0-9]{0,12}")
"""A version number in a path; anything else names no version (404)."""


def version_number(request: web.Request) -> int:
    """The `{version}` of the path. Raises NotFound when it is not a version number."""
    text = request.match_info["version"]
    if not VERSION_NUMBER.fullmatch(text):
        raise NotFound("Version not found")
    return int(text)


async def list_versions(request: web.Request) -> web.Response:
    """`GET .../records/{record_id}/versions`: one page of the record's versions, newest first (view rule)."""
    query = parse_query(request, VERSION_LIST_QUERY)
    page = await services(request).versions.list(
        principal_of(request), request.match_info["collection_name"], request.match_info["record_id"],
        page=query["page"], per_page=query["per_page"])
    return json_response(represent.record_version_page(page))


async def get_version(request: web.Request) -> web.Response:
    """`GET .../records/{record_id}/versions/{version}`: one version (view rule); 404 when there is none."""
    version = await services(request).versions.get(
        principal_of(request), request.match_info["collection_name"], request.match_info["record_id"],
        version_number(request))
    return json_response(represent.record_version(version))


async def restore_version(request: web.Request) -> web.Response:
    """`POST .../records/{record_id}/versions/{version}/restore`: write the version's data as an update
    (update rule, validated like one); 200 with the record as a PATCH answers it."""
    principal = principal_of(request)
    name = request.match_info["collection_name"]
    present = await services(request).records.presenter(name, record_view(request), principal)
    record = await services(request).versions.restore(principal, name, request.match_info["record_id"],
                                                      version_number(request))
    return json_response(await present(record))
