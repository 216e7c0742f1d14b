"""Headless CMS backend: collections, records, auth, webhooks on MongoDB and Redis."""

__version__ = "0.1.0"
