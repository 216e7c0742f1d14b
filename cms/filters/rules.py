"""Access rules (decisions.md, Access rules and Field rules): rule text + request context -> a
`Cond` of the one filter engine. Pure.

A rule is parsed once (`parsed_rule`, remembered) by `grammar.parse_rule`; `bind_rule` resolves it
against the collection and replaces every request variable by its value for one request
(`conditions.build`), folding what no longer depends on the record: the result is TRUE (every
record), FALSE (none) or a condition that `mongo.render` sends to the database and
`predicate.evaluate` decides in memory, with one value semantics. A variable's value is bound into
a `Literal`, so a rule can never put a client's keys or operators into a query: a `@request.data`
value that is an object or a list is compared as a whole, never spliced.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from cms.errors import InvalidFilter
from cms.filters.conditions import Cond, FieldResolver, build, term
from cms.filters.grammar import And, Compare, Literal, Node, Or, VarCompare, Variable, parse_rule

AUTH_VARIABLES = frozenset({"id", "collection", "role", "verified", "email"})
"""The names of `@request.auth.<name>`."""
DATA_ACTIONS = frozenset({"create", "update"})
"""The actions whose rules may read `@request.data.<field>`."""
ACTIONS = ("list", "view", "create", "update", "delete")
"""The five rules of a collection, in order; the attribute of each is `<action>_rule`."""


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
        term(node, resolver)
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
        term(Compare(node.left, node.op, _probe_literal(resolved.type), node.position), resolver)


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


def bind_rule(text: str, resolver: FieldResolver, context: RequestContext) -> Cond:
    """The rule `text` (not None or "", which the caller decides) for one request: TRUE, FALSE or a
    condition over the stored records (see the module docstring). Raises InvalidFilter when the
    rule no longer fits the collection (a field it names was removed)."""
    return build(parsed_rule(text), resolver, context)


def fields_compared_with_auth(text: str | None) -> frozenset[str]:
    """The fields a rule compares with an `@request.auth.*` variable (`author = @request.auth.id`):
    what a list under that rule filters by for every signed-in caller, so what deserves an index
    (issue 38). Empty for None, "" and a rule that does not parse. Raises nothing."""
    if not text:
        return frozenset()
    try:
        node = parsed_rule(text)
    except InvalidFilter:
        return frozenset()
    found: set[str] = set()
    stack: list[Node] = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, (And, Or)):
            stack.extend(item.items)
        elif isinstance(item, VarCompare):
            sides = (item.left, item.right)
            if any(isinstance(side, Variable) and side.scope == "auth" for side in sides):
                found.update(side for side in sides if isinstance(side, str))
    return frozenset(found)
