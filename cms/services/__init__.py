"""Domain rules: plain service classes with explicit dependencies; no aiohttp.web, no pymongo."""
