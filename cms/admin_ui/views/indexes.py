"""A collection's declared indexes on its edit page (issue 38; the section itself is rendered by
views/collections.py's `edit_page`, with every index the collection has and why it exists):

- `POST /_/collections/{name}/indexes`: add one, from `fields` (names separated by commas or spaces,
  `-` for descending: `status, -created`) and `unique`;
- `POST /_/collections/{name}/indexes/{index_name}/remove`: drop the declared index of that name.

Both go through the collection update seam (as `PATCH /api/v1/collections/{id}` with the whole list), so
every rule of declared indexes applies: a refusal (422: an unknown field, a 17th index, a unique index
over duplicates, ...) is shown in the section and nothing changes.
"""

from __future__ import annotations

import re
from typing import Any

from aiohttp import web

from cms.admin_ui.common import PREFIX, admin_page, flash_redirect
from cms.admin_ui.views.collections import edit_page
from cms.errors import CmsError, NotFound, ValidationFailed
from cms.models import Collection, IndexDeclaration, Principal
from cms.services.content.indexes import declared_name
from cms.web.context import services
from cms.web.uploads import read_form

MAX_FIELDS_TEXT = 500
"""Most characters of the add form's `fields` text (8 names at most are accepted anyway)."""
SEPARATORS = re.compile(r"[\s,]+")


def _declared(indexes: tuple[IndexDeclaration, ...]) -> list[dict[str, Any]]:
    return [{"fields": list(d.fields), "unique": d.unique} for d in indexes]


async def _collection(request: web.Request) -> Collection:
    return await services(request).catalog.by_name(request.match_info["collection_name"])


def _edited(collection: Collection) -> str:
    return f"{PREFIX}/collections/{collection.name}/edit#indexes"


@admin_page
async def add(request: web.Request, principal: Principal) -> web.StreamResponse:
    """POST /_/collections/{name}/indexes: the collection's declared indexes plus the one of the form."""
    collection = await _collection(request)
    form = await read_form(request)
    text, unique = str(form.get("fields", "")), form.get("unique") == "on"
    try:
        if len(text) > MAX_FIELDS_TEXT:
            raise ValidationFailed("Invalid indexes", errors={"fields": [f"At most {MAX_FIELDS_TEXT} characters."]})
        names = [name for name in SEPARATORS.split(text) if name]
        changed = await services(request).collections.update(
            principal, collection.id, indexes=[*_declared(collection.indexes), {"fields": names, "unique": unique}])
    except CmsError as exc:
        if exc.status >= 500 or exc.status == 404:
            raise
        return await edit_page(request, collection, index_error=exc,
                               index_form={"fields": text[:MAX_FIELDS_TEXT], "unique": unique})
    added = declared_name(changed.indexes[-1])
    return flash_redirect(request, _edited(changed), f"Index {added} added")


@admin_page
async def remove(request: web.Request, principal: Principal) -> web.StreamResponse:
    """POST /_/collections/{name}/indexes/{index_name}/remove: the declared indexes without that one."""
    collection = await _collection(request)
    index_name = request.match_info["index_name"]
    kept = [d for d in collection.indexes if declared_name(d) != index_name]
    if len(kept) == len(collection.indexes):
        raise NotFound(f"No declared index {index_name} on {collection.name}")
    try:
        changed = await services(request).collections.update(principal, collection.id, indexes=_declared(tuple(kept)))
    except CmsError as exc:
        if exc.status >= 500 or exc.status == 404:
            raise
        return await edit_page(request, collection, index_error=exc)
    return flash_redirect(request, _edited(changed), f"Index {index_name} removed")


def routes() -> list[web.RouteDef]:
    """The declared indexes' routes (forms of the collection edit page)."""
    path = PREFIX + "/collections/{collection_name}/indexes"
    return [web.post(path, add), web.post(path + "/{index_name}/remove", remove)]
