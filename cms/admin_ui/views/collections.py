"""Collections (`/_/collections`): the list of collections, and the schema editor that creates,
changes and deletes them.

- `GET /_/collections`: every collection with its type, fields and rules (as `GET /api/v1/collections`).
- `GET|POST /_/collections/new`: the create form; `GET|POST /_/collections/{name}/edit`: the edit form.
  The form carries the name, the type (create only), the auth switches (auth collections), one row per
  field (every field type and validation key of `cms.services.content.fields`, and the field's `view_rule`
  and `write_rule`), the five rules and, for auth collections, `email_view_rule`. The
  submitted form becomes the same body `POST`/`PATCH /api/v1/collections` load (same request schema)
  and goes to the same service call with the admin's Principal; a ValidationFailed or InvalidFilter is
  shown next to the field row, rule (a field's rule: beside it in its row) or input it names, and nothing
  is stored.
- `GET|POST /_/collections/{name}/delete`: a confirmation page (type the name), then the delete.
- The edit page also shows the collection's indexes, each with why it exists; declared ones are added and
  removed by views/indexes.py.

Rows are added and removed by static/collections.js (a `<template>` clone); the rules get a
`<datalist>` of the collection's field names and the `@request.auth.*` names.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from cms.admin_ui.common import (
    PREFIX,
    admin_page,
    confirmed_action,
    error_message,
    flash_redirect,
    redirect,
    render,
)
from cms.errors import CmsError, InvalidFilter, ValidationFailed
from cms.filters.rules import AUTH_VARIABLES, DATA_ACTIONS
from cms.models import Collection, FieldSpec, Principal, default_rules
from cms.services.content.fields import FIELD_TYPES, MULTI_TYPES, SYSTEM_FIELDS, TEXT_TYPES
from cms.services.content.index_advice import kept_indexes
from cms.web.context import load, services
from cms.web.schemas import CollectionCreateSchema, CollectionUpdateSchema
from cms.web.uploads import read_form

RULES = ("list_rule", "view_rule", "create_rule", "update_rule", "delete_rule")
EMAIL_VIEW_RULE = "email_view_rule"
FORM_RULES = (*RULES, EMAIL_VIEW_RULE)
"""The rules of the form: the five of records, then auth collections' `email_view_rule`."""
FIELD_RULES = ("view_rule", "write_rule")
"""A field's own rules (decisions.md, Field rules), each a text input with an "admins only" lock in its row."""
SWITCHES = ("otp_enabled", "mfa_enabled", "oauth_enabled")
SWITCH_LABELS = {"otp_enabled": "One-time code (OTP) login", "mfa_enabled": "Two-factor login (MFA)",
                 "oauth_enabled": "OAuth2 login"}
ROW_KEY = re.compile(r"^field-(\d{1,4})-name$")
ROW_ERROR_KEY = re.compile(r"^schema\.(\d+)\.(.+)$")
ROW_MESSAGE = re.compile(r"^field (\d+) \('[^']*'\): ")
RULE_MESSAGE = re.compile(r"^(list|view|create|update|delete|email_view)_rule: ")
FIELD_RULE_MESSAGE = re.compile(r"^field '([^']*)' (view_rule|write_rule): ")
ROW_TEXT_KEYS = ("name", "type", "min", "max", "pattern", "values", "max_select", "collection_id", *FIELD_RULES)
ROW_FLAGS = ("required", "unique", "cascade_delete", "view_rule_locked", "write_rule_locked", "localized")

Row = dict[str, Any]
"""One field row of the form as strings and flags (what the page shows and the browser submits)."""
EMPTY_ROW: Row = {**dict.fromkeys(ROW_TEXT_KEYS, ""), **dict.fromkeys(ROW_FLAGS, False), "type": "text"}
"""A new row: a text field, nothing typed in."""


# --- form <-> service ------------------------------------------------------------------------------


def _number(value: float | None) -> str:
    if value is None:
        return ""
    return str(int(value)) if float(value).is_integer() else str(value)


def _row_of(spec: FieldSpec) -> Row:
    v = spec.validation
    return {
        "name": spec.name, "type": spec.type, "required": v.required, "unique": v.unique,
        "min": _number(v.min), "max": _number(v.max), "pattern": v.pattern or "",
        "values": "\n".join(spec.values or ()), "max_select": "" if spec.max_select is None else str(spec.max_select),
        "collection_id": spec.collection_id or "", "cascade_delete": spec.cascade_delete,
        "view_rule": spec.view_rule or "", "view_rule_locked": spec.view_rule is None,
        "write_rule": spec.write_rule or "", "write_rule_locked": spec.write_rule is None,
        "localized": spec.localized,
    }


def _rows_of_form(form: Mapping[str, Any]) -> list[Row]:
    """The field rows of a submitted form, in page order (`field-<i>-<key>`; `i` need not be dense);
    rows with nothing typed in are left out."""
    rows: list[Row] = []
    for key in form:
        match = ROW_KEY.match(key)
        if match is None:
            continue
        prefix = f"field-{match.group(1)}-"
        row: Row = {k: str(form.get(prefix + k, "")).strip() for k in ROW_TEXT_KEYS}
        row["values"] = str(form.get(prefix + "values", ""))
        row.update({flag: form.get(prefix + flag) == "on" for flag in ROW_FLAGS})
        if any(row[k] for k in ROW_TEXT_KEYS if k not in ("type", "collection_id")) or row["values"].strip():
            rows.append(row)  # a row left blank (added, never filled) is not a field
    return rows


def _as_int(text: str) -> int | str:
    try:
        return int(text)
    except ValueError:
        return text  # refused by the schema (strict integer): its message goes next to the row


def _versions_of_form(text: str) -> dict[str, Any]:
    """The body's `versions` from the form's input: absent when left empty (create: none kept)."""
    return {"versions": _as_int(text)} if text else {}


def _definition(row: Row) -> dict[str, Any]:
    """A field row as the field definition `parse_schema` reads (keys that do not apply to the
    row's type are left out, as a REST client would)."""
    kind = row["type"]
    validation: dict[str, Any] = {"required": row["required"]}
    if kind not in ("bool", "json"):
        validation["unique"] = row["unique"]
    if kind in TEXT_TYPES or kind == "number":
        for key in ("min", "max"):
            if row[key]:
                validation[key] = row[key]  # a numeric string loads as a number; anything else is refused
    if kind in TEXT_TYPES and row["pattern"]:
        validation["pattern"] = row["pattern"]
    definition: dict[str, Any] = {"name": row["name"], "type": kind, "validation": validation}
    if kind == "select":
        definition["values"] = [line.strip() for line in row["values"].splitlines() if line.strip()]
    if kind in MULTI_TYPES and row["max_select"]:
        definition["max_select"] = _as_int(row["max_select"])
    if kind == "relation":
        definition["collection_id"] = row["collection_id"] or None
        definition["cascade_delete"] = row["cascade_delete"]
    for rule in FIELD_RULES:  # locked: None (admins only); else the text ("" = no restriction)
        definition[rule] = None if row[f"{rule}_locked"] else row[rule]
    if kind != "relation":
        definition["localized"] = row["localized"]  # decisions.md, Localized fields
    return definition


def _rules_of_form(form: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {rule: {"text": str(form.get(f"rule-{rule}", "")).strip(), "locked": form.get(f"lock-{rule}") == "on"}
            for rule in FORM_RULES}


def _rules_of(collection_rules: Any) -> dict[str, dict[str, Any]]:
    shown: dict[str, dict[str, Any]] = {}
    for rule in FORM_RULES:
        value = collection_rules.rule(rule[:-5])
        shown[rule] = {"text": value or "", "locked": value is None}
    return shown


def _rule_values(rules: Mapping[str, Mapping[str, Any]], *, auth: bool = True) -> dict[str, str | None]:
    """Locked: None (admins only); else the text ("" = everyone). Without `auth`, `email_view_rule`
    is left out (base collections have no email)."""
    return {rule: None if shown["locked"] else shown["text"] for rule, shown in rules.items()
            if auth or rule != EMAIL_VIEW_RULE}


def _placed_errors(error: CmsError, rows: list[Row]) -> dict[str, list[str]]:
    """Where each message of `error` is shown: `name`, `type`, a switch, `rule:<rule>`, `row:<i>`
    (the i-th submitted field row of `rows`), `row:<i>:<view_rule|write_rule>` (beside that rule of
    the row) or `schema` (the field list as a whole); `form` for the rest."""
    placed: dict[str, list[str]] = defaultdict(list)
    if isinstance(error, InvalidFilter):
        match = RULE_MESSAGE.match(error.detail)
        field_rule = FIELD_RULE_MESSAGE.match(error.detail)
        index = next((i for i, row in enumerate(rows) if field_rule and row["name"] == field_rule.group(1)), None)
        if match:
            placed[f"rule:{match.group(1)}_rule"].append(error.detail[match.end():])
        elif field_rule and index is not None:
            placed[f"row:{index}:{field_rule.group(2)}"].append(error.detail[field_rule.end():])
        else:
            placed["form"].append(error.detail)
    for key, messages in error_message(error).fields.items():
        row = ROW_ERROR_KEY.match(key)
        for message in messages:
            if row and row.group(2) in FIELD_RULES:
                placed[f"row:{row.group(1)}:{row.group(2)}"].append(message)
            elif row:
                placed[f"row:{row.group(1)}"].append(f"{row.group(2)}: {message}")
            elif key == "schema":
                numbered = ROW_MESSAGE.match(message)
                if numbered:
                    placed[f"row:{numbered.group(1)}"].append(message[numbered.end():])
                else:
                    placed["schema"].append(message)
            elif key in FORM_RULES:
                placed[f"rule:{key}"].append(message)
            elif key in ("name", "type", "versions", *SWITCHES):
                placed[key].append(message)
            else:
                placed["form"].append(f"{key}: {message}")
    return dict(placed)


def _suggestions(field_names: list[str]) -> list[str]:
    """What a rule may name: the system and schema fields, `@request.auth.*`, `@request.data.*`."""
    return [*sorted(SYSTEM_FIELDS), *field_names, *(f"@request.auth.{n}" for n in sorted(AUTH_VARIABLES)),
            *(f"@request.data.{n}" for n in field_names)]


async def _form_page(request: web.Request, *, mode: str, collection: Collection | None, name: str, type_: str,
                     switches: Mapping[str, Any], rows: list[Row], rules: Mapping[str, Mapping[str, Any]],
                     error: CmsError | None = None, versions: str = "0", index_error: CmsError | None = None,
                     index_form: Mapping[str, Any] | None = None) -> web.Response:
    every = await services(request).collections.list()
    failed = error or index_error
    return await render(
        request, "collections/form.html", status=failed.status if failed else 200, nav_collections=every,
        kept_indexes=kept_indexes(collection) if collection else [],
        index_error=error_message(index_error) if index_error else None,
        index_form=index_form or {"fields": "", "unique": False},
        targets=[(c.id, c.name) for c in every], mode=mode, collection=collection,
        name=name, type=type_, versions=versions, switches=switches, rows=rows, rules=rules, rule_names=FORM_RULES,
        data_rules=[f"{a}_rule" for a in DATA_ACTIONS], field_types=FIELD_TYPES, text_types=sorted(TEXT_TYPES),
        multi_types=sorted(MULTI_TYPES), switch_names=SWITCHES, switch_labels=SWITCH_LABELS,
        suggestions=_suggestions([r["name"] for r in rows if r["name"]]),
        empty_row=EMPTY_ROW, field_rules=FIELD_RULES,
        base_rules=_rule_values(_rules_of(default_rules("base"))),
        auth_rules=_rule_values(_rules_of(default_rules("auth"))),
        error=error_message(error) if error else None, placed=_placed_errors(error, rows) if error else {},
    )


# --- handlers --------------------------------------------------------------------------------------


@admin_page
async def index(request: web.Request, principal: Principal) -> web.StreamResponse:
    """GET /_/collections: every collection by name (record counts are left out: slow on the
    embedded server)."""
    collections = await services(request).collections.list()
    return await render(request, "collections/index.html", collections=collections, rule_names=RULES,
                        nav_collections=collections)


@admin_page
async def new(request: web.Request, principal: Principal) -> web.StreamResponse:
    """GET /_/collections/new: the create form (a base collection with one text field)."""
    type_ = "auth" if request.query.get("type") == "auth" else "base"
    return await _form_page(request, mode="create", collection=None, name="", type_=type_,
                            switches=dict.fromkeys(SWITCHES, ""),
                            rows=[EMPTY_ROW],
                            rules=_rules_of(default_rules(type_)))


def _tristate(value: Any) -> bool | None:
    return {"on": True, "off": False}.get(str(value or ""))


@admin_page
async def create(request: web.Request, principal: Principal) -> web.StreamResponse:
    """POST /_/collections/new: create through the service (as `POST /api/v1/collections`)."""
    form = await read_form(request)
    name, type_ = str(form.get("name", "")).strip(), str(form.get("type", "base"))
    switches = {s: str(form.get(s, "")) for s in SWITCHES}
    rows, rules = _rows_of_form(form), _rules_of_form(form)
    versions = str(form.get("versions", "")).strip()
    body: dict[str, Any] = {"name": name, "type": type_, "schema": [_definition(r) for r in rows],
                            **_rule_values(rules, auth=type_ == "auth"), **_versions_of_form(versions)}
    for switch in SWITCHES:
        if _tristate(switches[switch]) is not None:
            body[switch] = _tristate(switches[switch])
    try:
        loaded = load(CollectionCreateSchema(), body)
        collection = await services(request).collections.create(
            principal, loaded["name"], loaded["type"], loaded["schema"], otp_enabled=loaded["otp_enabled"],
            mfa_enabled=loaded["mfa_enabled"], oauth_enabled=loaded["oauth_enabled"],
            rules={rule: loaded[rule] for rule in FORM_RULES if rule in loaded}, versions=loaded["versions"])
    except CmsError as exc:
        if exc.status >= 500:
            raise
        return await _form_page(request, mode="create", collection=None, name=name, type_=type_,
                                switches=switches, rows=rows, rules=rules, error=exc, versions=versions)
    return flash_redirect(request, f"{PREFIX}/collections/{collection.name}/edit",
                          f"Collection {collection.name} created")


async def _collection(request: web.Request) -> Collection:
    """The collection of the path (`{collection_name}`). Raises NotFound."""
    return await services(request).catalog.by_name(request.match_info["collection_name"])


@admin_page
async def edit(request: web.Request, principal: Principal) -> web.StreamResponse:
    """GET /_/collections/{name}/edit: the collection in the form (a view: its explorer, views/aggregates.py)."""
    collection = await _collection(request)
    if collection.view is not None:
        return redirect(f"{PREFIX}/collections/{collection.name}/aggregate", request)
    return await edit_page(request, collection)


async def edit_page(request: web.Request, collection: Collection, *, index_error: CmsError | None = None,
                    index_form: Mapping[str, Any] | None = None) -> web.Response:
    """The edit page of `collection` as stored, with its indexes section (views/indexes.py) showing
    `index_error` (its status is the page's) and the add form filled with `index_form` (`fields`, `unique`)."""
    return await _form_page(request, mode="edit", collection=collection, name=collection.name, type_=collection.type,
                            switches={s: getattr(collection, s) for s in SWITCHES},
                            rows=[_row_of(spec) for spec in collection.fields], rules=_rules_of(collection.rules),
                            versions=str(collection.versions), index_error=index_error, index_form=index_form)


@admin_page
async def update(request: web.Request, principal: Principal) -> web.StreamResponse:
    """POST /_/collections/{name}/edit: name, schema, switches and rules through the service (as
    `PATCH /api/v1/collections/{id}`); the schema replaces the old one."""
    collections = services(request).collections
    collection = await _collection(request)
    form = await read_form(request)
    name = str(form.get("name", "")).strip()
    rows, rules = _rows_of_form(form), _rules_of_form(form)
    switches: dict[str, Any] = {s: form.get(s) == "on" for s in SWITCHES}
    versions = str(form.get("versions", "")).strip()
    body: dict[str, Any] = {"name": name, "schema": [_definition(r) for r in rows],
                            **_rule_values(rules, auth=collection.type == "auth"), **_versions_of_form(versions)}
    if collection.type == "auth":
        body.update(switches)
    try:
        loaded = load(CollectionUpdateSchema(), body)
        changed = await collections.update(
            principal, collection.id, name=loaded.get("name"), schema=loaded.get("schema"),
            otp_enabled=loaded.get("otp_enabled"), mfa_enabled=loaded.get("mfa_enabled"),
            oauth_enabled=loaded.get("oauth_enabled"), versions=loaded.get("versions"),
            rules={rule: loaded[rule] for rule in FORM_RULES if rule in loaded})
    except CmsError as exc:
        if exc.status >= 500 or exc.status == 404:
            raise
        return await _form_page(request, mode="edit", collection=collection, name=name, type_=collection.type,
                                switches=switches, rows=rows, rules=rules, error=exc, versions=versions)
    return flash_redirect(request, f"{PREFIX}/collections/{changed.name}/edit", f"Collection {changed.name} saved")


@admin_page
async def confirm_delete(request: web.Request, principal: Principal) -> web.StreamResponse:
    """GET /_/collections/{name}/delete: asks for the name before the delete."""
    collection = await _collection(request)
    return await render(request, "collections/delete.html", collection=collection, error=None)


@admin_page
async def delete(request: web.Request, principal: Principal) -> web.StreamResponse:
    """POST /_/collections/{name}/delete: the delete (as `DELETE /api/v1/collections/{id}`) once the
    typed name matches."""
    collections = services(request).collections
    collection = await _collection(request)
    form = await read_form(request)
    try:
        if str(form.get("confirm_name", "")).strip() != collection.name:
            raise ValidationFailed("Type the collection's name to confirm the delete",
                                   errors={"confirm_name": ["Does not match the collection's name."]})
        await collections.delete(principal, collection.id)
    except CmsError as exc:
        if exc.status >= 500 or exc.status == 404:
            raise
        return await render(request, "collections/delete.html", status=exc.status, collection=collection,
                            error=error_message(exc))
    return flash_redirect(request, PREFIX + "/collections", f"Collection {collection.name} deleted")


def routes() -> list[web.RouteDef]:
    """The collections screen's routes."""
    path = PREFIX + "/collections/{collection_name}"
    return [
        web.get(PREFIX + "/collections", index, name="admin_ui.collections"),
        web.get(PREFIX + "/collections/new", new, name="admin_ui.collections.new"),
        web.post(PREFIX + "/collections/new", create),
        web.get(path + "/edit", edit, name="admin_ui.collections.edit"),
        web.post(path + "/edit", update),
        *confirmed_action(path + "/delete", confirm_delete, delete, name="admin_ui.collections.delete"),
    ]

