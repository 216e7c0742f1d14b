"""Caching: the epoch and version counters in Redis (`counters.py`; the key names are in
cms/redis_keys.py, below services, where cms/observability reads them too), the one look-up of
collection definitions and how current it is (`catalog.py`), the catalog and session epochs'
in-process cache (`definition_cache.py`), the read cache of record lists and views (`read_cache.py`)
and single-flight loads (`single_flight.py`)."""
