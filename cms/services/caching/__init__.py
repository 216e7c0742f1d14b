"""Caching: the catalog and session epochs (`definition_cache.py`), the read cache of record lists
and views (`read_cache.py`) and single-flight loads (`single_flight.py`)."""
