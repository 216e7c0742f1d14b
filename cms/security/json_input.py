"""Bounded JSON decoding for text a client sends: request bodies and CSV cells (decisions.md,
Errors: "Malformed JSON is 400, never 500"; STYLE rule 16: every client-controlled size has a
named limit). Pure: no I/O.

Python's `json` turns hostile input into errors nobody expects: 1,000 nested arrays raise
`RecursionError`, a 5,000-digit integer a `ValueError` that tells the client about
`sys.set_int_max_str_digits`, `NaN` and `Infinity` are accepted, and `"\\ud800"` decodes to a
lone surrogate that no database can store. `decode_json` refuses all of these with one error
type and a plain message.
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_JSON_DEPTH = 64
"""Deepest accepted nesting of arrays and objects; a scalar at the top level is depth 0."""
MAX_JSON_INT_DIGITS = 100
"""Most digits of one JSON integer (nothing stored holds more than 19: BSON integers are 64-bit)."""

# A `\uD800`..`\uDFFF` escape: the only way JSON text can carry a surrogate.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


class JsonInputError(ValueError):
    """The text is not JSON we accept; `str(error)` is a plain message for the client."""


def decode_json(text: str | bytes) -> Any:
    """The value of JSON `text` (bytes are read as UTF-8).

    Raises JsonInputError when the text is not valid UTF-8 or not JSON, uses `NaN`/`Infinity`,
    nests arrays and objects deeper than MAX_JSON_DEPTH, holds an integer of more than
    MAX_JSON_INT_DIGITS digits, or holds a lone surrogate (`"\\ud800"`)."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JsonInputError(f"not UTF-8 text (invalid byte at offset {exc.start})") from None
    try:
        value = json.loads(text, parse_constant=_refuse_constant, parse_int=_parse_int)
    except RecursionError:
        raise JsonInputError(f"nested deeper than {MAX_JSON_DEPTH} levels") from None
    except JsonInputError:
        raise
    except json.JSONDecodeError as exc:
        raise JsonInputError(f"{exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except ValueError as exc:  # e.g. a float literal Python cannot read
        raise JsonInputError(f"invalid value ({type(exc).__name__})") from None
    check_depth(value)
    if _SURROGATE_ESCAPE.search(text):
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise JsonInputError("text is not valid Unicode (lone surrogate)") from None
    return value


def check_depth(value: Any, limit: int = MAX_JSON_DEPTH) -> None:
    """Raise JsonInputError when arrays and objects in `value` nest deeper than `limit`
    (iterative: a value too deep for recursion is still measured)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        if depth + 1 > limit:
            raise JsonInputError(f"nested deeper than {limit} levels")
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))


def _parse_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_JSON_INT_DIGITS:
        raise JsonInputError(f"a number has more than {MAX_JSON_INT_DIGITS} digits")
    return int(text)


def _refuse_constant(name: str) -> Any:
    raise JsonInputError(f"{name} is not valid JSON")
