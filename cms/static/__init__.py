"""Static browser pages served by the service (API explorer, emailed-link pages)."""
