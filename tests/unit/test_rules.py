"""The access-rule grammar and evaluator (`cms/filters/grammar.parse_rule`, `cms/filters/rules.py`)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest

from cms.errors import InvalidFilter
from cms.filters import values
from cms.filters.conditions import FALSE, TRUE, ResolvedField, all_of, build
from cms.filters.grammar import MAX_FILTER_LENGTH, Compare, Literal, VarCompare, Variable, parse_filter, parse_rule
from cms.filters.mongo import render
from cms.filters.predicate import evaluate
from cms.filters.rules import RequestContext, bind_rule, check_rule, fields_compared_with_auth
from cms.models import Collection, FieldSpec, Principal
from cms.services.access import field_view

FIELDS = {
    "id": ResolvedField("_id", "id"),
    "created": ResolvedField("created", "datetime"),
    "owner": ResolvedField("owner", "text"),
    "status": ResolvedField("status", "select"),
    "views": ResolvedField("views", "number"),
    "flag": ResolvedField("flag", "bool"),
    "meta": ResolvedField("meta", "json"),
    "tags": ResolvedField("tags", "select"),
    "published": ResolvedField("published", "date"),
    "nothing": ResolvedField("nothing", "text"),
    "missing": ResolvedField("missing", "text"),
}


class Resolver:
    def resolve(self, name: str) -> ResolvedField | None:
        return FIELDS.get(name)


RESOLVER = Resolver()


def bound(rule: str, context: RequestContext) -> Any:
    """The rule bound for `context`, as MongoDB sees it (True / False / a query)."""
    return render(bind_rule(rule, RESOLVER, context))
ALICE = RequestContext(auth_id="alice", auth_collection="customers", auth_verified=True, auth_email="a@x.io")
ANONYMOUS = RequestContext()
STAFF_ADMIN = RequestContext(auth_id="root", auth_role="admin", auth_email="root@x.io")


def text(value: str, position: int, quoted: bool = True) -> Literal:
    return Literal("string", value, value, quoted, position)


# --- grammar --------------------------------------------------------------------------------------


def test_variables_stand_on_either_side_and_plain_terms_stay_compares() -> None:
    assert parse_rule('owner = @request.auth.id && status = "published"').items == (  # type: ignore[union-attr]
        VarCompare("owner", "=", Variable("auth", "id"), 0),
        Compare("status", "=", text("published", 37), 28),
    )
    node = parse_rule("@request.data.owner=@request.auth.id")
    assert node == VarCompare(Variable("data", "owner"), "=", Variable("auth", "id"), 0)
    assert isinstance(node, VarCompare) and isinstance(node.right, Variable)
    assert node.right.position == 20 and node.right.text == "@request.auth.id"


@pytest.mark.parametrize("rule, position", [
    ("@request.foo.x = 1", 0),
    ("@request.auth = 1", 0),
    ("@request.auth.id.x = 1", 0),
    ("owner = @request", 8),
    ("owner = @x", 8),
    ("(@request.auth.email ~ @request..x)", 23),
])
def test_malformed_variables_are_refused_with_their_position(rule: str, position: int) -> None:
    with pytest.raises(InvalidFilter, match=f"unknown variable.* at position {position}$"):
        parse_rule(rule)


def test_filters_do_not_read_variables() -> None:
    assert parse_filter("owner = @request.auth.id") == Compare("owner", "=", text("@request.auth.id", 8, False), 0)


def test_rules_are_bounded_like_filters() -> None:
    with pytest.raises(InvalidFilter, match="longer than 4096"):
        parse_rule("owner = " + "x" * 5000)
    with pytest.raises(InvalidFilter, match="too many conditions"):
        parse_rule(" && ".join(["@request.auth.id != ''"] * 101))


# --- checking a rule when it is set ----------------------------------------------------------------


@pytest.mark.parametrize("action, rule", [
    ("list", None), ("list", ""), ("view", "owner = @request.auth.id"),
    ("create", '@request.auth.id != "" && @request.data.owner = @request.auth.id'),
    ("update", "@request.data.views > 3 || @request.auth.verified = true"),
    ("list", "status = 'owner' || owner = \"views\""),
    ("list", 'status = "published" || owner = @request.auth.id'),
    ("list", "@request.auth.role = admin"),
    ("delete", "owner ~ @request.auth.email"),
])
def test_valid_rules_pass(action: str, rule: str | None) -> None:
    check_rule(rule, action, RESOLVER)


@pytest.mark.parametrize("action, rule, message", [
    ("list", "nope = @request.auth.id", "list_rule: unknown field 'nope' at position 0"),
    ("view", "owner = 1 && nope = 2", "view_rule: unknown field 'nope' at position 13"),
    ("view", "owner = @request.auth.name", "view_rule: unknown variable '@request.auth.name' at position 8"),
    ("list", "owner = @request.data.owner", "list_rule: '@request.data.owner' is only available in create"),
    ("delete", "@request.data.owner = 1", "delete_rule: '@request.data.owner' is only available in create"),
    ("create", "@request.data.nope = 1", "create_rule: unknown field 'nope' in '@request.data.nope' at position 0"),
    ("update", "flag > @request.auth.id", "update_rule: operator '>' is not supported on bool"),
    ("update", "views ~ @request.auth.id", "update_rule: operator '~' needs a text field"),
    ("list", "meta > @request.auth.id", "list_rule: operator '>' is not supported on json"),
    ("list", "owner = ", "list_rule: unexpected end of filter"),
    ("update", "@request.data.views > views", "update_rule: 'views' is a field; a rule compares with a value"),
    ("list", "status = owner", "list_rule: 'owner' is a field; a rule compares with a value"),
])
def test_invalid_rules_name_the_rule_and_the_position(action: str, rule: str, message: str) -> None:
    with pytest.raises(InvalidFilter) as caught:
        check_rule(rule, action, RESOLVER)
    assert caught.value.detail.startswith(message), caught.value.detail


# --- binding a rule to a request --------------------------------------------------------------------


@pytest.mark.parametrize("rule, context, expected", [
    ("owner = @request.auth.id", ALICE, {"owner": "alice"}),
    ("owner = @request.auth.id", ANONYMOUS, {"owner": ""}),
    ("id = @request.auth.id", ALICE, {"_id": "alice"}),
    ('@request.auth.id != ""', ALICE, True),
    ('@request.auth.id != ""', ANONYMOUS, False),
    ('@request.auth.id != "" && views > 3', ANONYMOUS, False),
    ('@request.auth.id != "" && views > 3', ALICE, {"views": {"$gt": 3}}),
    ('@request.auth.id = "" || views > 3', ANONYMOUS, True),
    ('@request.auth.id = "" || views > 3', ALICE, {"views": {"$gt": 3}}),
    ('status = "published" || owner = @request.auth.id', ALICE,
     {"$or": [{"status": "published"}, {"owner": "alice"}]}),
    ('@request.auth.collection = "customers"', ALICE, True),
    ('@request.auth.collection = "staff"', ALICE, False),
    ("@request.auth.role = admin", STAFF_ADMIN, True),
    ("@request.auth.role = admin", ALICE, False),
    ("@request.auth.verified = true", ALICE, True),
    ("@request.auth.verified = true", ANONYMOUS, False),
    ("owner ~ @request.auth.email", ALICE, {"owner": {"$regex": r"a@x\.io", "$options": "i"}}),
    ("views = @request.auth.id", ALICE, False),  # a text id never equals a number
    ("views != @request.auth.id", ALICE, True),
    ("flag = @request.auth.verified", ALICE, {"flag": True}),
    ("(owner = @request.auth.id && (@request.auth.verified = false || status = a))", ALICE,
     {"$and": [{"owner": "alice"}, {"status": "a"}]}),
])
def test_bind_rule(rule: str, context: RequestContext, expected: Any) -> None:
    assert bound(rule, context) == expected


def data(**values: Any) -> RequestContext:
    return RequestContext(auth_id="alice", data=values)


@pytest.mark.parametrize("rule, context, expected", [
    ("@request.data.owner = @request.auth.id", data(owner="alice"), True),
    ("@request.data.owner = @request.auth.id", data(owner="bob"), False),
    ("@request.data.owner = @request.auth.id", data(), False),
    ("@request.data.owner = null", data(), True),
    ("@request.data.views > 10", data(views=11), True),
    ("@request.data.views > 10", data(views="11"), False),  # values compare by JSON type
    ("@request.data.views > @request.data.owner", data(views=2, owner="1"), False),
    ("@request.data.flag = true", data(flag=1), False),
    ("@request.data.status ~ PUB", data(status="unpublished"), True),
    ("@request.data.status !~ PUB", data(status="draft"), True),
    # objects and lists are compared whole and never become part of a query
    ("owner = @request.data.owner", data(owner={"$ne": None}), False),
    ("owner != @request.data.owner", data(owner={"$ne": None}), True),
    ("owner = @request.data.owner", data(owner=["alice"]), False),
    ("owner = @request.data.owner", data(owner="alice"), {"owner": "alice"}),
    ("views >= @request.data.views", data(views=5), {"views": {"$gte": 5}}),
    ("views >= @request.data.views", data(views=float("nan")), False),
    ("owner = @request.data.owner", data(owner=None), {"owner": None}),
    ("owner ~ @request.data.owner", data(owner="x" * 600), False),  # too long for a pattern
])
def test_bind_rule_with_submitted_data(rule: str, context: RequestContext, expected: Any) -> None:
    assert bound(rule, context) == expected


def test_a_rule_naming_a_removed_field_fails_when_bound() -> None:
    with pytest.raises(InvalidFilter, match="unknown field 'gone'"):
        bind_rule("gone = @request.auth.id", RESOLVER, ALICE)


@pytest.mark.parametrize("left, op, right, bare, expected", [
    ("a", "=", "a", None, True), ("a", "!=", "a", None, False), ("A", "=", "a", None, False),
    (1, "=", 1.0, None, True), (True, "=", 1, None, False), (1, "=", True, None, False),
    (None, "=", None, None, True), (None, "=", "", None, False), ("", "=", None, None, False),
    ("123", "=", 123, "123", True), ("123", "=", 123, None, False),
    ([1, 2], "=", [1, 2], None, True), ({"a": 1}, "=", {"a": 1}, None, True), ({"a": 1}, "=", {"a": 2}, None, False),
    ({"a": True}, "=", {"a": 1}, None, False), ([1], "=", [1, 2], None, False),
    (2, ">", 1, None, True), (1, ">", 1, None, False), (1, ">=", 1, None, True), (1, "<", 2, None, True),
    (2, "<=", 1, None, False), ("b", ">", "a", None, True), ("1", ">", 0, None, False), (True, ">", False, None, False),
    (None, "<", 1, None, False),
    ("Hello", "~", "ELL", None, True), ("Hello", "~", "xyz", None, False), ("Hello", "!~", "xyz", None, True),
    (5, "~", "5", None, False), (5, "!~", "5", None, True),
])
def test_request_values_compare_with_one_semantics(left: Any, op: str, right: Any, bare: str | None,
                                                  expected: bool) -> None:
    # `bare`: the source text of a bare number literal, which a text value compares with
    assert values.compare(left, op, bare if bare is not None else right) is expected


# --- evaluating a query against one record -----------------------------------------------------------

WHEN = datetime(2026, 1, 2, 3, 4, 5, 123000, tzinfo=UTC)
DOC = {"_id": "r1", "created": WHEN, "owner": "alice", "views": 7, "flag": False, "tags": ["a", "B"],
       "nothing": None, "meta": {"k": 1}}


def decide(filter_text: str, document: dict[str, Any] = DOC) -> bool:
    """The filter decided in memory for `document` (the predicate back end)."""
    return evaluate(build(parse_filter(filter_text), RESOLVER), document)


@pytest.mark.parametrize("filter_text, expected", [
    ("owner = alice", True), ("owner = bob", False), ("owner = null", False),
    ("missing = null", True), ("nothing = null", True), ("missing != null", False),
    ("missing != x", True), ("owner != alice", False),
    ("views = 7", True), ("views = 7.0", True), ("flag = false", True),
    ("views > 6", True), ("views >= 8", False), ("views < 8", True),
    ("views <= 6", False), ("owner > a", True),
    ("tags = a", True), ("tags = b", False), ("tags != a", False), ("tags > A", True),
    ("tags ~ b", True), ("owner ~ LIC", True), ("missing ~ x", False),
    ("owner !~ LIC", False), ("missing !~ x", True),
    ("created = '2026-01-02T03:04:05.123Z'", True), ("created = '2026-01-02T03:04:05.123456Z'", True),
    ("created > '2026-01-02T03:04:05.122Z'", True),
    ("meta = 1", False),
    ("owner = alice && views = 7", True), ("owner = alice && views = 8", False),
    ("owner = bob || views = 7", True), ("owner = bob || views = 8", False),
])
def test_the_predicate_decides_filters(filter_text: str, expected: bool) -> None:
    assert decide(filter_text) is expected


def test_constants_and_folding() -> None:
    assert evaluate(TRUE, DOC) is True and evaluate(FALSE, DOC) is False
    term = build(parse_filter("views = 7"), RESOLVER)
    assert all_of(TRUE, term) == term and all_of(FALSE, term) == FALSE
    assert render(all_of(TRUE, TRUE)) is True




# --- added to pin behaviour that mutation testing showed unchecked -------------------------------------


def test_a_rule_of_exactly_the_maximum_length_is_accepted() -> None:
    rule = "owner = " + "x" * (MAX_FILTER_LENGTH - 8)
    assert parse_rule(rule) == Compare("owner", "=", text("x" * (MAX_FILTER_LENGTH - 8), 8, False), 0)


@pytest.mark.parametrize("rule, message", [
    ("@request.auth.id", "unexpected end of filter, expected an operator after field '@request.auth.id' "
                         "at position 16"),
    ("@request.data.owner x", "missing operator after field '@request.data.owner', found 'x' at position 20"),
    ("@request.nope", "unknown variable: expected @request.auth.<name> or @request.data.<field> at position 0"),
])
def test_rule_syntax_errors_name_the_variable_and_the_position(rule: str, message: str) -> None:
    with pytest.raises(InvalidFilter) as caught:
        parse_rule(rule)
    assert caught.value.detail == message


def test_rule_values_read_like_filter_values() -> None:
    # A bare word runs to whitespace or a parenthesis, whatever letters it holds.
    assert parse_rule("(@request.data.status = MAX_X)") == VarCompare(
        Variable("data", "status"), "=", text("MAX_X", 24, False), 1)
    # Only \\, \' and \" are escapes in a quoted value; any other backslash is kept.
    node = parse_rule(r"@request.auth.email = 'a\Xb\'c\\d'")
    assert isinstance(node, VarCompare) and node.right == Literal("string", r"a\Xb'c\d", r"a\Xb\'c\\d", True)


def test_rule_values_record_where_they_start() -> None:
    node = parse_rule("@request.auth.verified = true || @request.data.owner = null || @request.data.views = 2")
    positions = [(item.right.value, item.right.position) for item in node.items]  # type: ignore[union-attr]
    assert positions == [(True, 25), (None, 55), (2, 85)]


def test_unknown_auth_variables_list_the_known_ones() -> None:
    with pytest.raises(InvalidFilter) as caught:
        check_rule("owner = @request.auth.name", "view", RESOLVER)
    assert caught.value.detail == (
        "view_rule: unknown variable '@request.auth.name' at position 8 (known: @request.auth.collection, "
        "@request.auth.email, @request.auth.id, @request.auth.role, @request.auth.verified)")


def test_an_operator_unfit_for_the_field_is_reported_at_the_field() -> None:
    with pytest.raises(InvalidFilter) as caught:
        check_rule("views = 1 && flag > @request.auth.id", "update", RESOLVER)
    assert caught.value.detail == "update_rule: operator '>' is not supported on bool field 'flag' at position 13"


@pytest.mark.parametrize("action, rule", [
    ("create", "views < @request.data.views"),
    ("list", "views >= @request.auth.id"),  # the operator is checked, not the variable's value
    ("list", "flag = @request.auth.verified"),
    ("list", "flag != @request.auth.id"),
    ("update", "created > @request.data.created"),
    ("list", "created <= @request.auth.email"),
    ("create", "published = @request.data.published"),
    ("list", "published < @request.auth.id"),
    ("list", "owner != @request.auth.id && tags ~ @request.auth.role"),
    ("update", "meta = @request.data.meta"),
])
def test_a_field_compared_with_a_variable_passes_for_every_field_type(action: str, rule: str) -> None:
    check_rule(rule, action, RESOLVER)


class ResolverWithoutId:
    def resolve(self, name: str) -> ResolvedField | None:
        return FIELDS.get(name) if name != "id" else None


def test_request_data_id_is_always_known_in_create_rules() -> None:
    check_rule("@request.data.id = @request.auth.id", "create", ResolverWithoutId())
    with pytest.raises(InvalidFilter, match="unknown field 'nope' in '@request.data.nope'"):
        check_rule("@request.data.id = @request.data.nope", "create", ResolverWithoutId())


@pytest.mark.parametrize("rule, context, expected", [
    # every term fixed by the request: the rule folds to one answer
    ('@request.auth.id != "" && @request.auth.verified = true', ALICE, True),
    ('@request.auth.id != "" && @request.auth.verified = true', ANONYMOUS, False),
    ('@request.auth.id = "" || @request.auth.verified = false', ALICE, False),
    ('@request.auth.id = "" || @request.auth.verified = false', ANONYMOUS, True),
    # a bare literal lets a text value equal it as written, a quoted one does not turn a number into text
    ("@request.data.owner = 123", data(owner="123"), True),
    ("@request.data.owner != 123", data(owner="123"), False),
    ("@request.data.owner = '123'", data(owner=123), False),
    ("@request.data.owner = 'it\\'s'", data(owner="it\\'s"), False),
    # a submitted object or list, or a value too long for a pattern, contains nothing
    ("owner !~ @request.data.owner", data(owner={"a": 1}), True),
    ("owner ~ @request.data.owner", data(owner=["a"]), False),
    ("owner !~ @request.data.owner", data(owner="x" * 600), True),
    # a submitted value is read by the field's type, as the same literal in a filter would be
    ("owner = @request.data.flag", data(flag=True), {"owner": "true"}),
    ("owner = @request.data.flag", data(flag=False), {"owner": "false"}),
    ("owner = @request.data.views", data(views=5), {"owner": "5"}),
    ("views = @request.data.views", data(views=2.5), {"views": 2.5}),
    ("views < @request.data.views", data(views=float("inf")), False),
    ("views = @request.data.owner", data(owner="5"), {"views": 5}),
    ("flag = @request.data.owner", data(owner="true"), {"flag": True}),
    ("flag = @request.data.views", data(views=1), False),
    ("created >= @request.data.owner", data(owner="2026-01-02T10:00:00+02:00"),
     {"created": {"$gte": datetime(2026, 1, 2, 8, tzinfo=UTC)}}),
    ("views > @request.data.views", data(), False),  # null orders nothing
    ("views != @request.data.views", data(), {"views": {"$ne": None}}),
])
def test_bind_rule_folds_and_types_values(rule: str, context: RequestContext, expected: Any) -> None:
    assert bound(rule, context) == expected


def test_binding_an_unchecked_rule_refuses_unknown_names_with_their_position() -> None:
    with pytest.raises(InvalidFilter) as caught:
        bind_rule("owner = 'x' || @request.auth.name = 1", RESOLVER, ALICE)
    assert caught.value.detail == "unknown variable '@request.auth.name' at position 15"
    with pytest.raises(InvalidFilter) as caught:
        bind_rule("views > 1 && gone = @request.auth.id", RESOLVER, ALICE)
    assert caught.value.detail == "unknown field 'gone' at position 13"


@pytest.mark.parametrize("left, op, right, expected", [
    (1, "<", 1, False), (1, "<", 1.5, True), (1, "<=", 1, True), (1, "<=", 2, True), ("a", "<=", "a", True),
    ("b", "<=", "a", False), (1, ">=", 2, False), (2, ">", 2, False), ("a", "<", 1, False), (1, "<=", None, False),
])
def test_request_values_order_numbers_and_strings(left: Any, op: str, right: Any, expected: bool) -> None:
    assert values.compare(left, op, right) is expected


@pytest.mark.parametrize("filter_text, expected", [
    ("views > 7", False), ("views >= 7", True), ("views < 7", False),
    ("views <= 7", True), ("views >= 7.5", False), ("views <= 6.5", False),
    ("created >= '2026-01-02T03:04:05.123Z'", True), ("created < '2026-01-02T03:04:05.123Z'", False),
    ("created <= '2026-01-02T03:04:05.123Z'", True),
    # null matches a list that holds null, not one that does not
    ("tags = null", False), ("tags != null", True),
])
def test_the_predicate_orders_and_compares_like_mongodb(filter_text: str, expected: bool) -> None:
    assert decide(filter_text) is expected


def test_null_against_a_list_holding_null() -> None:
    assert decide("tags = null", {"tags": ["a", None]}) is True
    assert decide("tags != null", {"tags": ["a", None]}) is False


@pytest.mark.parametrize("rule, submitted, expected", [
    ("@request.data.owner = null", {"owner": "null"}, False),
    ("@request.data.owner != null", {"owner": "null"}, True),
    ("@request.data.owner = true", {"owner": "true"}, False),
    ("@request.data.code = 12", {"code": "12"}, True),
    ("@request.data.code ~ 12", {"code": "a123"}, True),
    ("@request.data.code !~ 12", {"code": "a123"}, False),
    ("@request.data.code ~ 12", {"code": 123}, False),
])
def test_bare_literals_read_as_text_only_when_they_are_numbers(rule: str, submitted: dict[str, Any],
                                                                expected: bool) -> None:
    assert bound(rule, RequestContext(data=submitted)) is expected


@pytest.mark.parametrize("rule, expected", [
    ("owner = @request.auth.id", {"owner"}),
    ('status = "x" || (views > 1 && owner = @request.auth.id)', {"owner"}),
    ("@request.data.owner = @request.auth.id", set()),
    ('@request.auth.id != ""', set()),
    ("owner = 'x'", set()),
    (None, set()), ("", set()), ("owner =", set()),
])
def test_the_fields_a_rule_compares_with_the_caller(rule: str | None, expected: set[str]) -> None:
    assert fields_compared_with_auth(rule) == expected


def test_bound_field_views_are_remembered_per_rules_and_caller() -> None:
    """`access.field_view` binds a caller's field rules once; a changed rule (even under the same
    collection id and version), another caller or another verified flag is bound afresh."""
    now = datetime(2026, 1, 1, tzinfo=UTC)
    notes = Collection(id="c1", name="notes", type="base", created=now, updated=now, fields=(
        FieldSpec("owner", "text"), FieldSpec("secret", "text", view_rule="owner = @request.auth.id"),
        FieldSpec("flag", "bool", view_rule="@request.auth.verified = true")))
    ann = Principal(kind="collection_user", user_id="ann", collection_name="users")
    view = field_view(ann, notes)
    assert field_view(ann, notes) is view
    assert view.key_parts() == (("secret", {"owner": "ann"}), ("flag", False))
    assert field_view(replace(ann, verified=True), notes).key_parts() == (("secret", {"owner": "ann"}),)
    assert field_view(replace(ann, user_id="bob"), notes).key_parts()[0] == ("secret", {"owner": "bob"})
    opened = replace(notes, fields=(*notes.fields[:1], replace(notes.fields[1], view_rule=""), notes.fields[2]))
    assert field_view(ann, opened).key_parts() == (("flag", False),)
    hidden = replace(notes, fields=(*notes.fields[:1], replace(notes.fields[1], view_rule=None), notes.fields[2]))
    assert field_view(ann, hidden).unknown == frozenset({"secret"})
