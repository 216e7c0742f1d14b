"""Filter, sort and search parameters -> MongoDB queries (decisions.md, Records).

`grammar` turns filter text into an AST (`Compare`, `And`, `Or`) and knows nothing of
MongoDB; `sort` parses `-created,title` into `SortKey`s; `mongo` resolves fields through a
`FieldResolver` and is the only code that builds `$` operators from user input. Every
failure is `cms.errors.InvalidFilter` (400 `invalid_filter`). Imports nothing from `cms`
but `cms.errors`.
"""

from cms.filters.grammar import (
    MAX_FILTER_DEPTH,
    MAX_FILTER_LENGTH,
    MAX_FILTER_TERMS,
    And,
    Compare,
    Literal,
    Node,
    Or,
    parse_filter,
)
from cms.filters.mongo import (
    MAX_REGEX_LENGTH,
    MAX_SEARCH_WORDS,
    FieldResolver,
    ResolvedField,
    search_query,
    text_search_query,
    to_mongo_query,
    to_mongo_sort,
)
from cms.filters.sort import MAX_SORT_FIELDS, SortKey, parse_sort

__all__ = [
    "MAX_FILTER_DEPTH",
    "MAX_FILTER_LENGTH",
    "MAX_FILTER_TERMS",
    "MAX_REGEX_LENGTH",
    "MAX_SEARCH_WORDS",
    "MAX_SORT_FIELDS",
    "And",
    "Compare",
    "FieldResolver",
    "Literal",
    "Node",
    "Or",
    "ResolvedField",
    "SortKey",
    "parse_filter",
    "parse_sort",
    "search_query",
    "text_search_query",
    "to_mongo_query",
    "to_mongo_sort",
]
