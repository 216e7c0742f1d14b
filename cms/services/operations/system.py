"""Health and statistics (spec: System)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from cms import __version__

Ping = Callable[[], Awaitable[Any]]
StatsSource = Callable[[], Awaitable[dict[str, Any]]]
PING_TIMEOUT_S = 3.0


class SystemService:
    """Answers health checks (one ping per dependency, with a time-out) and statistics."""

    def __init__(self, pings: dict[str, Ping], stats: dict[str, StatsSource]) -> None:
        self._pings = pings
        self._stats = stats
        self.started = time.monotonic()

    async def stats(self) -> dict[str, Any]:
        """`{<dependency>: {...figures} | {"error": ...}, "uptime_s": float}`."""
        names = list(self._stats)
        results = await asyncio.gather(*(self._stats[n]() for n in names), return_exceptions=True)
        body: dict[str, Any] = {
            n: ({"error": type(r).__name__} if isinstance(r, BaseException) else r)
            for n, r in zip(names, results, strict=True)
        }
        body["uptime_s"] = self.uptime_s()
        return body

    async def health(self) -> tuple[bool, dict[str, str]]:
        """(all ok, `{status, <dependency>: "ok" | "error: ...", version}`)."""
        names = list(self._pings)
        results = await asyncio.gather(*(self._check(self._pings[n]) for n in names))
        body = {"status": "ok", **dict(zip(names, results, strict=True)), "version": __version__}
        healthy = all(r == "ok" for r in results)
        if not healthy:
            body["status"] = "unavailable"
        return healthy, body

    async def _check(self, ping: Ping) -> str:
        try:
            await asyncio.wait_for(ping(), PING_TIMEOUT_S)
        except TimeoutError:
            return "error: timed out"
        except Exception as exc:  # noqa: BLE001 - any failure means the dependency is down
            return f"error: {type(exc).__name__}"
        return "ok"

    def uptime_s(self) -> float:
        """Seconds since this process started serving."""
        return round(time.monotonic() - self.started, 3)
