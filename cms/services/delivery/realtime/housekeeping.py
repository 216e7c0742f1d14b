"""Realtime housekeeping of one process (decisions.md, Realtime): every TOUCH_INTERVAL_S, the clients it
holds are kept alive in Redis (forgotten CLIENT_TTL_S after their last stream), the stream is trimmed to
its retention, and the reader checks it did not fall behind the trimming."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime

from cms.services.delivery.realtime.connections import ConnectionRegistry
from cms.services.delivery.realtime.reader import StreamReader
from cms.services.delivery.realtime.stream import EventStream

log = logging.getLogger("cms.realtime")

TOUCH_INTERVAL_S = 60.0
"""How often, in seconds, the clients this process holds are kept alive in Redis and the stream trimmed."""


async def keep_house(stream: EventStream, registry: ConnectionRegistry, reader: StreamReader,
                     clock: Callable[[], datetime]) -> None:
    """Run the housekeeping until cancelled; a failed round is logged and the next one runs."""
    while True:
        await asyncio.sleep(TOUCH_INTERVAL_S)
        try:
            await stream.touch(list(registry.connections))
            while await stream.trim(int(clock().timestamp() * 1000)):
                await asyncio.sleep(0)
            await reader.check_history()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("realtime: housekeeping failed (%r)", exc)
