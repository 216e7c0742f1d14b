"""The realtime key names under their old address, for cms/services/delivery/realtime/stream.py only.

Every Redis key name is in cms/redis_keys.py (below services, so cms/observability may import it).
The realtime package is being split (cms/services/delivery/realtime/hub.py) on another branch, so its
one import is left pointing here until that lands; then `from cms import redis_keys as keys` in
stream.py and this module goes. `tests/unit/test_layers.py` fails if anything else imports it.
"""

from __future__ import annotations

from cms.redis_keys import realtime_active, realtime_client, realtime_floor, realtime_stream

__all__ = ["realtime_active", "realtime_client", "realtime_floor", "realtime_stream"]
