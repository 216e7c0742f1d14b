"""Peers' advisories and what trying them against this service found, as tests (issue 28, item 3-4)."""
