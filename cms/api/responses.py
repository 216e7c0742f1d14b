"""JSON responses, serialized with orjson (issue "Fast reads", hot-path diet)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from aiohttp import web

_OPTIONS = orjson.OPT_NON_STR_KEYS


def json_response(data: Any, *, status: int = 200, headers: Mapping[str, str] | None = None) -> web.Response:
    """`data` as an `application/json` response (UTF-8, compact), as `web.json_response` but
    several times faster. Raises TypeError for what JSON cannot carry (as `json.dumps` does),
    and for an integer beyond 64 bits, which nothing stored holds (BSON integers are 64-bit)."""
    return web.Response(body=orjson.dumps(data, option=_OPTIONS), status=status, headers=headers,
                        content_type="application/json")
