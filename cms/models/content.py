"""Collections and what they hold: field definitions, access rules, records, pages of a list, files.

Frozen dataclasses, no I/O; re-exported by `cms.models`."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any, Generic, TypeAlias, TypeVar

T = TypeVar("T")

SortPath: TypeAlias = str | tuple[str, ...]
"""One key of a records sort: a document path (`title`, `title.de`), or a tuple of paths meaning the
first of them that holds a value (not null or missing): a localized field read through its locale's
fallback chain (decisions.md, Localized fields)."""
SortSpec: TypeAlias = list[tuple[SortPath, int]]
"""A records sort, most significant key first: (path, 1 ascending | -1 descending), as pymongo's sort
spec but for the tuple paths."""


@dataclass(frozen=True)
class Validation:
    """Validation keys of a field definition (decisions.md, Records).

    `min`/`max` bound the length of text and the value of numbers; `pattern` is a regex for text.
    """

    required: bool = False
    min: float | None = None
    max: float | None = None
    pattern: str | None = None
    unique: bool = False


@dataclass(frozen=True)
class FieldSpec:
    """One field of a collection schema.

    `type` is one of `cms.services.content.fields.FIELD_TYPES`. `values`/`max_select` apply to select,
    `collection_id`/`max_select`/`cascade_delete` to relation, `max_select`, `max_size` (bytes),
    `mime_types` (`type/subtype` or `type/*`), `thumbs` (`WxH` plus a mode letter) and `protected` to
    file (decisions.md, Files in records, thumbnails and file tokens).
    `cascade_delete`: deleting a target record deletes the records that point to it (otherwise
    the reference is removed from them). `view_rule` and `write_rule` are the field's rules
    (decisions.md, Field rules): "" (absent) no restriction beyond the collection's rules, None
    admins only, else an expression of the rule grammar.
    """

    name: str
    type: str
    validation: Validation = Validation()
    values: tuple[str, ...] | None = None
    max_select: int | None = None
    collection_id: str | None = None
    cascade_delete: bool = False
    view_rule: str | None = ""
    write_rule: str | None = ""
    localized: bool = False
    """decisions.md, Localized fields: the stored value is an object of locale code to value."""
    max_size: int | None = None
    mime_types: tuple[str, ...] | None = None
    thumbs: tuple[str, ...] | None = None
    protected: bool = False


@dataclass(frozen=True)
class Locale:
    """One entry of the `locales` setting: a BCP 47 `code` and the locale whose value is shown where
    this one has none (`fallback`; None: none)."""

    code: str
    fallback: str | None = None


@dataclass(frozen=True)
class Locales:
    """The `locales` setting (decisions.md, Localized fields): its `entries` in order, the first the
    default locale; fallbacks form chains without cycles (`cms.services.content.locales` checks a
    new value)."""

    entries: tuple[Locale, ...] = (Locale("en"),)

    @property
    def default(self) -> str:
        """The default locale's code: what a read or write without `?locale=` means."""
        return self.entries[0].code

    @property
    def codes(self) -> tuple[str, ...]:
        """Every configured code, in order."""
        return tuple(entry.code for entry in self.entries)

    def chain(self, code: str) -> tuple[str, ...]:
        """`code` and its fallbacks in the order they are tried (`de` -> `("de", "en")`); a fallback
        that is not configured, or one already in the chain, ends it. `code` need not be configured
        (then it is alone)."""
        fallbacks = {entry.code: entry.fallback for entry in self.entries}
        chain = [code]
        while (following := fallbacks.get(chain[-1])) is not None and following in fallbacks \
                and following not in chain:
            chain.append(following)
        return tuple(chain)


DEFAULT_LOCALES = Locales()
"""The `locales` setting's default, `[{"code": "en"}]`."""


SIGNED_IN_RULE = '@request.auth.id != ""'
"""The default create, update and delete rule of a base collection: any signed-in principal."""
OWN_RECORD_RULE = "id = @request.auth.id"
"""The default list, view, update and delete rule of an auth collection: the user's own record."""


@dataclass(frozen=True)
class AccessRules:
    """The five access rules of a collection (decisions.md, Access rules): each is None (admins
    only), "" (everyone, anonymous callers included) or an expression of the rule grammar
    (`filters.grammar.parse_rule`), kept verbatim as it was set."""

    list_rule: str | None = ""
    view_rule: str | None = ""
    create_rule: str | None = SIGNED_IN_RULE
    update_rule: str | None = SIGNED_IN_RULE
    delete_rule: str | None = SIGNED_IN_RULE
    email_view_rule: str | None = OWN_RECORD_RULE
    """Auth collections: who sees a user's `email` (decisions.md, Field rules); applied as a field
    `view_rule`. Base collections ignore it."""

    def rule(self, action: str) -> str | None:
        """The rule of `action` (list, view, create, update, delete or email_view). Raises AttributeError
        for another action."""
        value: str | None = getattr(self, f"{action}_rule")
        return value


BASE_RULES = AccessRules()
"""The rules of a base collection created without rules: today's behaviour (public reads,
signed-in writes)."""
AUTH_RULES = AccessRules(list_rule=OWN_RECORD_RULE, view_rule=OWN_RECORD_RULE, create_rule=None,
                         update_rule=OWN_RECORD_RULE, delete_rule=OWN_RECORD_RULE)
"""The rules of an auth collection created without rules: each user reaches only their own record;
users come from register."""


def default_rules(collection_type: str) -> AccessRules:
    """The rules a collection of `collection_type` (`base` or `auth`) gets when none are given."""
    return AUTH_RULES if collection_type == "auth" else BASE_RULES


@dataclass(frozen=True)
class IndexDeclaration:
    """One entry of a collection's `indexes` (decisions.md, Indexes and query plans): `fields` are 1 to 8
    names of schema fields or `id`, `created`, `updated`, each `-`-prefixed for descending, in key
    order; `unique` forbids two records with the same values (absent values do not collide)."""

    fields: tuple[str, ...]
    unique: bool = False


@dataclass(frozen=True)
class ViewDefinition:
    """What a view collection shows (decisions.md, Aggregation and view collections): the groups of the
    records of collection `source` (by name) that match `filter`, keyed by `group_by`, with
    `aggregates`; each text as the aggregate endpoint's parameter of that name ("" for none)."""

    source: str
    filter: str = ""
    group_by: str = ""
    aggregates: str = ""


VIEW_TYPE = "view"
"""The type of a view collection: read-only records computed from another collection's."""


@dataclass(frozen=True)
class Collection:
    """A user-defined collection; `version` grows by one on every update (schema cache key).
    `indexes` are the indexes an admin declared (the service's automatic ones are not listed).
    `versions`: how many versions of each record are kept (0 = none; decisions.md, Drafts,
    versions and scheduled publishing; cms/services/content/versions.py). `view` is set for a
    collection of type `view` (VIEW_TYPE): its `fields` are those of its records, derived from the
    definition (`content.views`)."""

    id: str
    name: str
    type: str
    fields: tuple[FieldSpec, ...]
    created: datetime
    updated: datetime
    version: int = 1
    otp_enabled: bool = False
    mfa_enabled: bool = False
    oauth_enabled: bool = False
    rules: AccessRules = BASE_RULES
    indexes: tuple[IndexDeclaration, ...] = ()
    versions: int = 0
    view: ViewDefinition | None = None
    locales: Locales = DEFAULT_LOCALES
    """Not stored with the collection: the `locales` setting as of the catalog epoch the definition was
    looked up under (the catalog attaches it, `caching.catalog`), so a definition and the locales it
    is read with change together on every replica."""
    drafts: bool = False
    """Whether records have a published copy and a working copy (decisions.md, Drafts, versions and
    scheduled publishing; docs/concepts/drafts.md)."""

    def field(self, name: str) -> FieldSpec | None:
        """The schema field called `name`, or None."""
        return next((f for f in self.fields if f.name == name), None)

    @cached_property
    def localized_fields(self) -> tuple[str, ...]:
        """The names of the fields with `localized: true`, in schema order (computed once per definition)."""
        return tuple(spec.name for spec in self.fields if spec.localized)


DRAFT, PUBLISHED, CHANGED = "draft", "published", "changed"
"""The `status` values of a record of a collection with drafts (decisions.md, Drafts, versions and
scheduled publishing): never published (or unpublished), published with no pending change, published
with a pending working copy."""


@dataclass(frozen=True)
class DraftState:
    """Where a record of a collection with drafts stands: `status` (DRAFT, PUBLISHED or CHANGED),
    `published_at` (when its published copy was last published; None for a draft), `scheduled_at` (a
    pending scheduled publish, else None), `schedule_error` (why the last scheduled publish failed,
    else None) and `revision` (the working state's counter, raised by every change of it: the
    condition of a publish, so two replicas publishing at once cannot both win; 0 for a published
    copy, which has none)."""

    status: str
    published_at: datetime | None = None
    scheduled_at: datetime | None = None
    schedule_error: str | None = None
    revision: int = 0


@dataclass(frozen=True)
class Record:
    """A record: system fields plus the values of its collection's fields in `data`; `state` is set
    for the records of a collection with drafts (their published copy, or their working copy with
    its status), None elsewhere."""

    id: str
    created: datetime
    updated: datetime
    data: dict[str, Any]
    state: DraftState | None = None


@dataclass(frozen=True)
class RecordVersion:
    """One stored version of a record (decisions.md, Drafts, versions and scheduled publishing):
    `version` counts up from 1 per record; `created` is when the write it records happened; `by`
    is the writer's user id (None: the system, or an anonymous caller); `data` holds the record's
    field values as that write left them (an auth collection's: its schema fields only)."""

    collection_id: str
    record_id: str
    version: int
    created: datetime
    by: str | None
    data: dict[str, Any]


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a list: `page` is 1-based, `total` counts every match."""

    items: list[T]
    total: int
    page: int
    per_page: int


@dataclass(frozen=True)
class QueryPlan:
    """How the database ran one list query, summarised from its `explain` (decisions.md, Indexes and
    query plans): `index` is the name of the index it read (None: none), `collection_scan` whether
    it read the whole collection, `docs_examined` the documents it read, `returned` the ones it
    returned."""

    index: str | None
    collection_scan: bool
    docs_examined: int
    returned: int


@dataclass(frozen=True)
class QueryShape:
    """The shape of one record query (issue 38, item 3): its filter's field names and operators and its
    sort, never a value. `text` shows it (`{status: $eq, views: $gte} sort -created`); `equality`
    names the fields the query pins (`$eq`, `$in`) and `ranges` those it bounds (`$gt`, `$gte`, `$lt`,
    `$lte`) in its top-level conjunction, `sort` the sort keys (`-created`, `-id`: `id` for `_id`),
    the index advice's ESR inputs (cms.services.content.index_advice)."""

    text: str
    equality: tuple[str, ...] = ()
    ranges: tuple[str, ...] = ()
    sort: tuple[str, ...] = ()


@dataclass(frozen=True)
class SlowQuery:
    """One query shape of a collection that took longer than SLOW_QUERY_MS, as every replica reported
    it (cms.services.content.slow_queries): `id` (stable for the collection and shape), `count` of slow
    runs, the longest and the last duration in milliseconds, when it was last seen, and
    `suggested_index`, the declared index that would serve it (None when an index already does, or no
    index can)."""

    id: str
    collection_id: str
    collection: str
    shape: QueryShape
    count: int
    max_ms: float
    last_ms: float
    last_seen: datetime
    suggested_index: IndexDeclaration | None = None


@dataclass(frozen=True)
class StoredFile:
    """A file attached to a record (spec: Files), its bytes in GridFS.

    `size` is in bytes; `sha256` is the hex SHA-256 of the bytes, computed while uploading;
    `collection` is the collection's name and `collection_id` its id; `content_type` is a
    validated `type/subtype` (with an optional charset), the type of the bytes' signature when they
    have one; `field` is the file field of the record the file was uploaded for (None: uploaded to
    the record without naming one)."""

    id: str
    filename: str
    content_type: str
    size: int
    collection_id: str
    collection: str
    record_id: str
    sha256: str
    created: datetime
    field: str | None = None


RELEASE_PENDING, RELEASE_SCHEDULED, RELEASE_PUBLISHED, RELEASE_FAILED = "pending", "scheduled", "published", "failed"
"""A release's `status` (decisions.md, Drafts, versions and scheduled publishing: Releases)."""


@dataclass(frozen=True)
class ReleaseItem:
    """One record of a release: record `record_id` of collection `collection_id` (its name `collection`
    when it was added: the answer shows the current name while the collection exists)."""

    collection_id: str
    collection: str
    record_id: str


@dataclass(frozen=True)
class Release:
    """A set of records of collections with drafts published together (docs/concepts/releases.md):
    `status` one of RELEASE_PENDING, RELEASE_SCHEDULED, RELEASE_PUBLISHED, RELEASE_FAILED; `scheduled_at`
    its pending scheduled publish; `published_at` when it was published; `error` and `errors` (`{"items.3":
    [message]}`) why its last publish failed, else None and {}."""

    id: str
    name: str
    items: tuple[ReleaseItem, ...]
    status: str
    created: datetime
    updated: datetime
    scheduled_at: datetime | None = None
    published_at: datetime | None = None
    error: str | None = None
    errors: dict[str, list[str]] = field(default_factory=dict)
