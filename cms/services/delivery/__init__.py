"""Delivery: the event bus (`events.py`), webhooks and their sender, and mail."""
