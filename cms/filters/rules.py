"""Access rules (decisions.md, Access rules): rule AST + request context -> a decision. Pure.

A rule is parsed by `grammar.parse_rule`. `bind_rule` replaces every request variable by its
value for one request and folds what no longer depends on the record:

- `True`: every record is permitted (the rule holds whatever the record);
- `False`: no record is permitted (the rule fails whatever the record);
- a MongoDB query document: the records it matches are permitted.

The query is built by `mongo.to_mongo_query` (the filter translator) after a variable's value
is bound into a `Literal`, so a rule can never put a client's keys or operators into a query:
a `@request.data` value that is an object or a list is compared as a whole, never spliced.
`matches` evaluates such a query against one stored document in memory, with MongoDB's
semantics for the operators `to_mongo_query` emits; create rules and single-record checks use
it, list rules send the query to the database.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from typing import Any

from cms.errors import InvalidFilter
from cms.filters.grammar import And, Compare, Literal, Node, Or, VarCompare, Variable, parse_rule
from cms.filters.mongo import FieldResolver, to_mongo_query

AUTH_VARIABLES = frozenset({"id", "collection", "role", "verified", "email"})
"""The names of `@request.auth.<name>`."""
DATA_ACTIONS = frozenset({"create", "update"})
"""The actions whose rules may read `@request.data.<field>`."""
ACTIONS = ("list", "view", "create", "update", "delete")
"""The five rules of a collection, in order; the attribute of each is `<action>_rule`."""

Decision = bool | dict[str, Any]
"""What a bound rule permits: True (every record), False (none) or a MongoDB query."""

_MISSING = object()
_ORDERINGS: dict[str, Callable[[Any, Any], Any]] = {
    ">": operator.gt, ">=": operator.ge, "<": operator.lt, "<=": operator.le,
    "$gt": operator.gt, "$gte": operator.ge, "$lt": operator.lt, "$lte": operator.le,
}
"""The ordering operators of the grammar and of MongoDB queries."""


@dataclass(frozen=True)
class RequestContext:
    """The request variables of a rule. `auth_id` is the principal's user id ("" when anonymous),
    `auth_collection` its auth collection's name ("" for admin-table users and anonymous callers),
    `auth_role` `admin` / `user` for admin-table users ("" otherwise), `auth_verified` and
    `auth_email` its user's; `data` the submitted values of a create or update (field -> value;
    a field not submitted reads as null)."""

    auth_id: str = ""
    auth_collection: str = ""
    auth_role: str = ""
    auth_verified: bool = False
    auth_email: str = ""
    data: Mapping[str, Any] = field(default_factory=dict)

    def value(self, variable: Variable) -> Any:
        """The value of `variable` in this request. Raises InvalidFilter for an unknown name."""
        if variable.scope == "data":
            return self.data.get(variable.name)
        if variable.name not in AUTH_VARIABLES:
            raise InvalidFilter(f"unknown variable '{variable.text}' at position {variable.position}")
        return getattr(self, f"auth_{variable.name}")


@lru_cache(maxsize=1024)
def parsed_rule(text: str) -> Node:
    """`grammar.parse_rule`, remembered for the 1,024 most recent rule texts (the AST is
    immutable). Raises InvalidFilter."""
    return parse_rule(text)


def check_rule(text: str | None, action: str, resolver: FieldResolver) -> None:
    """Validate the `<action>_rule` text of a collection when it is set: None (admins only) and ""
    (everyone) are always valid; otherwise the syntax, every field (through `resolver`, with its
    operators and value types), every `@request.auth.<name>`, and `@request.data.<field>` (a field
    of the collection, in create and update rules only). Raises InvalidFilter whose message starts
    with `<action>_rule: ` and gives the position."""
    if text is None or text == "":
        return
    try:
        _check_node(parsed_rule(text), action, resolver)
    except InvalidFilter as exc:
        raise InvalidFilter(f"{action}_rule: {exc.detail}") from None


def _check_node(node: Node, action: str, resolver: FieldResolver) -> None:
    if isinstance(node, (And, Or)):
        for item in node.items:
            _check_node(item, action, resolver)
        return
    if isinstance(node, Compare):
        to_mongo_query(node, resolver)
        _check_not_a_field(node.value, resolver)
        return
    for side in (node.left, node.right):
        if isinstance(side, Variable):
            _check_variable(side, action, resolver)
    if isinstance(node.right, Literal):
        _check_not_a_field(node.right, resolver)
    if isinstance(node.left, str):
        resolved = resolver.resolve(node.left)
        if resolved is None:
            raise InvalidFilter(f"unknown field '{node.left}' at position {node.position}")
        # The operator must suit the field: check it with a value of the field's own kind.
        to_mongo_query(Compare(node.left, node.op, _probe_literal(resolved.type), node.position), resolver)


def _check_not_a_field(value: Literal, resolver: FieldResolver) -> None:
    """A rule compares with values and variables, not with fields: an unquoted word that names a
    field (`@request.data.views > views`) would silently be the text "views"; refuse it."""
    if value.kind == "string" and not value.quoted and resolver.resolve(value.raw) is not None:
        raise InvalidFilter(
            f"'{value.raw}' is a field; a rule compares with a value or a variable, not with a field "
            f"(quote it to mean the text) at position {value.position}")


def _check_variable(variable: Variable, action: str, resolver: FieldResolver) -> None:
    where = f"at position {variable.position}"
    if variable.scope == "auth":
        if variable.name not in AUTH_VARIABLES:
            names = ", ".join(f"@request.auth.{n}" for n in sorted(AUTH_VARIABLES))
            raise InvalidFilter(f"unknown variable '{variable.text}' {where} (known: {names})")
        return
    if action not in DATA_ACTIONS:
        raise InvalidFilter(f"'{variable.text}' is only available in create and update rules {where}")
    if variable.name != "id" and resolver.resolve(variable.name) is None:
        raise InvalidFilter(f"unknown field '{variable.name}' in '{variable.text}' {where}")


_PROBES = {
    "number": Literal("number", 0, "0", False),
    "bool": Literal("bool", True, "true", False),
    "date": Literal("string", "2000-01-01", "2000-01-01", True),
    "datetime": Literal("string", "2000-01-01", "2000-01-01", True),
}
_TEXT_PROBE = Literal("string", "x", "x", True)


def _probe_literal(field_type: str) -> Literal:
    """A value of a field's kind, standing in for a variable when the operator is checked
    (`title ~ @request.auth.email` is fine, `flag > @request.auth.id` is not)."""
    return _PROBES.get(field_type, _TEXT_PROBE)


def bind_rule(text: str, resolver: FieldResolver, context: RequestContext) -> Decision:
    """The rule `text` (not None or "", which the caller decides) for one request: True, False, or
    a MongoDB query over the stored records (see the module docstring). Raises InvalidFilter when
    the rule no longer fits the collection (a field it names was removed)."""
    return _bind(parsed_rule(text), resolver, context)


def _bind(node: Node, resolver: FieldResolver, context: RequestContext) -> Decision:
    if isinstance(node, Compare):
        return to_mongo_query(node, resolver)
    if isinstance(node, VarCompare):
        return _bind_compare(node, resolver, context)
    if isinstance(node, (And, Or)):
        # False decides an And and True an Or; the other constant drops out.
        decisive = isinstance(node, Or)
        parts: list[dict[str, Any]] = []
        for item in node.items:
            bound = _bind(item, resolver, context)
            if bound is decisive:
                return decisive
            if isinstance(bound, dict):
                parts.append(bound)
        if not parts:
            return not decisive
        return parts[0] if len(parts) == 1 else {"$or" if decisive else "$and": parts}
    raise TypeError(f"not a rule node: {node!r}")


def _bind_compare(node: VarCompare, resolver: FieldResolver, context: RequestContext) -> Decision:
    right = context.value(node.right) if isinstance(node.right, Variable) else node.right
    if isinstance(node.left, Variable):
        left = context.value(node.left)
        if isinstance(right, Literal):
            return compare_values(left, node.op, right.value, right.raw if right.kind == "number" else None)
        return compare_values(left, node.op, right)
    # A field compared with a variable: the variable's value becomes the literal of a filter term.
    literal = right if isinstance(right, Literal) else _literal_of(right)
    if literal is None:  # an object or a list: equal to no stored value
        return node.op in ("!=", "!~")
    try:
        return to_mongo_query(Compare(node.left, node.op, literal, node.position), resolver)
    except InvalidFilter:
        if resolver.resolve(node.left) is None:
            raise
        # The value does not fit the field's type (a text id against a number field), or is too
        # long for a pattern: it equals no stored value.
        return node.op in ("!=", "!~")


def _literal_of(value: Any) -> Literal | None:
    """A variable's value as a quoted literal (so the field's type decides how it is read), or
    None for an object or a list."""
    if value is None:
        return Literal("null", None, "null", False)
    if isinstance(value, bool):
        return Literal("bool", value, "true" if value else "false", False)
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            return None
        return Literal("number", value, repr(value), False)
    if isinstance(value, str):
        return Literal("string", value, value, True)
    return None


def compare_values(left: Any, op: str, right: Any, right_bare: str | None = None) -> bool:
    """`left OP right` for two request values (or a value and a literal): `=` / `!=` by JSON type
    (a bool equals only a bool, numbers compare by value, null equals only null; `right_bare`, the
    source text of a bare number literal, lets a text value equal or contain `123` as a filter's
    text field would); `>`, `>=`, `<`, `<=` between two numbers or two strings, else false; `~` a
    case-insensitive substring of a string, `!~` its negation. Raises nothing."""
    if right_bare is not None and isinstance(left, str) and op in ("~", "!~"):
        right = right_bare
    if op in ("=", "!="):
        equal = _json_equal(left, right) or (
            right_bare is not None and isinstance(left, str) and left == right_bare)
        return equal if op == "=" else not equal
    if op in ("~", "!~"):
        contains = isinstance(left, str) and isinstance(right, str) and right.lower() in left.lower()
        return contains if op == "~" else not contains
    same_kind = _is_number(left) and _is_number(right) or isinstance(left, str) and isinstance(right, str)
    return same_kind and op in _ORDERINGS and bool(_ORDERINGS[op](left, right))


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _json_equal(left: Any, right: Any) -> bool:
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool) and left == right
    if _is_number(left) and _is_number(right):
        return bool(left == right)
    if type(left) is not type(right):
        return False
    if isinstance(left, list):
        return len(left) == len(right) and all(_json_equal(a, b) for a, b in zip(left, right, strict=True))
    if isinstance(left, dict):
        return left.keys() == right.keys() and all(_json_equal(v, right[k]) for k, v in left.items())
    return bool(left == right)


# --- evaluating a query in memory -----------------------------------------------------------------


def matches(query: Decision, document: Mapping[str, Any]) -> bool:
    """Whether the stored `document` (`_id`, `created`, `updated` and the field values) satisfies
    `query`, as MongoDB would decide it, for the query shapes `to_mongo_query` emits: `{}`,
    `$and`, `$or`, `{path: value}`, and `{path: {$ne | $gt | $gte | $lt | $lte | $regex (with
    $options "i") | $not (a compiled pattern) | $in: ...}}`. A missing field reads as null; a list
    value matches when the whole list or any element does. True and False stand for themselves.
    Raises ValueError for a query shape outside that set (a programming error)."""
    if isinstance(query, bool):
        return query
    for key, condition in query.items():
        if key == "$and":
            if not all(matches(part, document) for part in condition):
                return False
        elif key == "$or":
            if not any(matches(part, document) for part in condition):
                return False
        elif key.startswith("$"):
            raise ValueError(f"unsupported query operator {key!r}")
        elif not _field_matches(document.get(key, _MISSING), condition):
            return False
    return True


def _field_matches(value: Any, condition: Any) -> bool:
    if isinstance(condition, dict):
        return all(_operator_matches(value, op, operand, condition) for op, operand in condition.items()
                   if op != "$options")
    return _equals(value, condition)


def _operator_matches(value: Any, op: str, operand: Any, condition: Mapping[str, Any]) -> bool:
    if op == "$ne":
        return not _equals(value, operand)
    if op == "$in":
        return any(_equals(value, item) for item in operand)
    if op == "$regex":
        flags = re.IGNORECASE if "i" in condition.get("$options", "") else 0
        return _any_element(value, lambda v: isinstance(v, str) and re.search(operand, v, flags) is not None)
    if op == "$not":
        if not isinstance(operand, re.Pattern):
            raise ValueError(f"unsupported $not operand {operand!r}")
        return not _any_element(value, lambda v: isinstance(v, str) and operand.search(v) is not None)
    if op in ("$gt", "$gte", "$lt", "$lte"):
        return _any_element(value, lambda v: _ordered(v, op, operand))
    raise ValueError(f"unsupported query operator {op!r}")


def _any_element(value: Any, test: Any) -> bool:
    if isinstance(value, list):
        return any(test(v) for v in value)
    return value is not _MISSING and bool(test(value))


def _equals(value: Any, operand: Any) -> bool:
    """MongoDB equality: null matches a missing field and null; a list matches when it equals the
    operand or one of its elements does."""
    if operand is None:
        return value is _MISSING or value is None or (isinstance(value, list) and None in value)
    if value is _MISSING:
        return False
    if isinstance(value, list) and not isinstance(operand, list):
        return any(_scalar_equal(v, operand) for v in value)
    return _scalar_equal(value, operand)


def _scalar_equal(value: Any, operand: Any) -> bool:
    if isinstance(value, datetime) or isinstance(operand, datetime):
        return (isinstance(value, datetime) and isinstance(operand, datetime)
                and _bson_time(value) == _bson_time(operand))
    return _json_equal(value, operand)


def _bson_time(moment: datetime) -> datetime:
    """`moment` as BSON stores it: to the millisecond."""
    return moment.replace(microsecond=moment.microsecond // 1000 * 1000)


def _ordered(value: Any, op: str, operand: Any) -> bool:
    """MongoDB's ordering compares values of one kind only: numbers, strings or dates."""
    if _is_number(value) and _is_number(operand):
        pass
    elif isinstance(value, str) and isinstance(operand, str):
        pass
    elif isinstance(value, datetime) and isinstance(operand, datetime):
        value, operand = _bson_time(value), _bson_time(operand)
    else:
        return False
    return bool(_ORDERINGS[op](value, operand))
