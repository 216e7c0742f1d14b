"""The flows of publishing (decisions.md, Drafts, versions and scheduled publishing): a record's publish, unpublish,
draft and schedule, its versions, and releases (several records published at once)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from cms_client._core import Call, Flow, Params, ask, segment
from cms_client._records import records_path
from cms_client.shapes import Record, RecordVersion, RecordVersionPage, Release, ReleaseItemInput, ReleasePage

RELEASES_PATH = "/api/v1/releases"
"""The releases resource (admins)."""

When = datetime | str
"""A moment to publish at: an aware `datetime` (a naive one is UTC, as the service reads it) or ISO 8601 text."""


def iso_moment(at: When) -> str:
    """`at` as the ISO 8601 text the API takes (a datetime in UTC; text as given)."""
    if isinstance(at, str):
        return at
    moment = at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
    return moment.isoformat().replace("+00:00", "Z")


def _at_body(at: When | None) -> dict[str, Any] | None:
    return None if at is None else {"at": iso_moment(at)}


def publish(collection: str, record_id: str, at: When | None = None, locale: str | None = None) -> Flow[Record]:
    """Publish the record's working copy now (with `locale`: only that locale's values of localized fields), or
    schedule it for `at` (in the future: 422 otherwise; replaces a pending schedule; the record answers with
    `scheduled_at`). The record after; CmsError 422 when the working copy does not validate (nothing changes)."""
    params: Params = {"locale": locale}
    return (yield from ask(Call[Record]("POST", records_path(collection, record_id) + "/publish", params=params,
                                        json_body=_at_body(at) or {})))


def unpublish(collection: str, record_id: str) -> Flow[Record]:
    """Turn a published record back into a `draft` (its content kept as the working copy); the record after."""
    return (yield from ask(Call[Record]("POST", records_path(collection, record_id) + "/unpublish")))


def discard_draft(collection: str, record_id: str) -> Flow[None]:
    """Drop the record's pending working copy (204). CmsError 404 when there is none."""
    return (yield from ask(Call[None]("DELETE", records_path(collection, record_id) + "/draft", expect="none")))


def cancel_schedule(collection: str, record_id: str) -> Flow[None]:
    """Cancel the record's scheduled publish (204). CmsError 404 when none is pending."""
    return (yield from ask(Call[None]("DELETE", records_path(collection, record_id) + "/schedule", expect="none")))


def list_versions(collection: str, record_id: str, page: int = 1, per_page: int = 30) -> Flow[RecordVersionPage]:
    """The record's versions, newest first: `{items: [{version, created, by, data}], total, page, per_page}`."""
    params: Params = {"page": page, "per_page": per_page}
    return (yield from ask(Call[RecordVersionPage]("GET", records_path(collection, record_id) + "/versions",
                                                   params=params)))


def get_version(collection: str, record_id: str, version: int) -> Flow[RecordVersion]:
    """Version `version` (from 1) of the record. CmsError 404 when it is not kept."""
    path = f"{records_path(collection, record_id)}/versions/{int(version)}"
    return (yield from ask(Call[RecordVersion]("GET", path)))


def restore_version(collection: str, record_id: str, version: int) -> Flow[Record]:
    """Write version `version`'s data over the record (the working copy, with drafts; else an update), validated
    like an update; the record after."""
    path = f"{records_path(collection, record_id)}/versions/{int(version)}/restore"
    return (yield from ask(Call[Record]("POST", path)))


def release_path(release_id: str | None = None) -> str:
    """`/api/v1/releases[/{release_id}]`, the id escaped."""
    return RELEASES_PATH if release_id is None else f"{RELEASES_PATH}/{segment(release_id)}"


def releases_list(page: int = 1, per_page: int = 30) -> Flow[ReleasePage]:
    """One page of releases, newest first (admins): `{items, total, page, per_page}`."""
    params: Params = {"page": page, "per_page": per_page}
    return (yield from ask(Call[ReleasePage]("GET", release_path(), params=params)))


def releases_get_one(release_id: str) -> Flow[Release]:
    """One release. CmsError 404."""
    return (yield from ask(Call[Release]("GET", release_path(release_id))))


def releases_create(name: str, items: Sequence[ReleaseItemInput]) -> Flow[Release]:
    """Create a release (`pending`) of `items` (`{collection, record_id}`, at most 1,000, collections with drafts):
    201 and the release. CmsError 422 naming `items.<index>`."""
    body = {"name": name, "items": [dict(item) for item in items]}
    return (yield from ask(Call[Release]("POST", release_path(), json_body=body)))


def releases_update(release_id: str, changes: Mapping[str, Any]) -> Flow[Release]:
    """Rename a release or replace its items (`{name?, items?}`); the release after. CmsError 409 once published."""
    return (yield from ask(Call[Release]("PATCH", release_path(release_id), json_body=dict(changes))))


def releases_delete(release_id: str) -> Flow[None]:
    """Delete a release (its records keep their working copies)."""
    return (yield from ask(Call[None]("DELETE", release_path(release_id), expect="none")))


def releases_publish(release_id: str, at: When | None = None) -> Flow[Release]:
    """Publish every item's working copy at once, all or nothing (CmsError 422 naming `items.<index>`; 409 once
    published), or schedule that for `at` (`scheduled`); the release after."""
    return (yield from ask(Call[Release]("POST", release_path(release_id) + "/publish",
                                         json_body=_at_body(at) or {})))


def releases_cancel_schedule(release_id: str) -> Flow[None]:
    """Cancel the release's scheduled publish (204). CmsError 404 when none is pending."""
    return (yield from ask(Call[None]("DELETE", release_path(release_id) + "/schedule", expect="none")))
