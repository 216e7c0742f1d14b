"""The embedded servers `cms serve` starts as child processes when MONGODB_URL / REDIS_URL are unset:
SecantusDB (`runtime/embedded_db.py`, with its work-around) and redis-server (`runtime/embedded.py`)."""
