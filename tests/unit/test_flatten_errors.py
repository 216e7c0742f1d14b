"""flatten_errors: marshmallow messages -> the flat 422 `errors` (decisions.md, Errors)."""

from typing import Any

import pytest

from cms.errors import flatten_errors


@pytest.mark.parametrize("messages, kwargs, expected", [
    ({"email": ["Bad."]}, {}, {"email": ["Bad."]}),
    (["Bad."], {}, {"_schema": ["Bad."]}),
    (["Bad."], {"root_key": "data"}, {"data": ["Bad."]}),
    ({0: {"name": ["Invalid."]}}, {"prefix": "schema"}, {"schema.0.name": ["Invalid."]}),
    ({0: {"validation": {"min": ["Not a number."]}}, 2: {"_schema": ["Invalid input type."]}}, {"prefix": "schema"},
     {"schema.0.validation.min": ["Not a number."], "schema.2": ["Invalid input type."]}),
    ({"tags": {1: ["Must be one of: a, b."]}}, {}, {"tags.1": ["Must be one of: a, b."]}),
    ({"_schema": ["Whole body."]}, {}, {"_schema": ["Whole body."]}),
    ({"n": [{"deep": ["x"]}, "flat"]}, {}, {"n.deep": ["x"], "n": ["flat"]}),
    ({"n": 5}, {}, {"n": ["5"]}),
], ids=["flat", "root-list", "root-key", "many", "nested-and-object", "list-item", "root-schema", "mixed", "non-str"])
def test_flatten_errors(messages: Any, kwargs: dict[str, str], expected: dict[str, list[str]]) -> None:
    assert flatten_errors(messages, **kwargs) == expected
