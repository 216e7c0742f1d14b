"""The API's schemas as TypedDicts, generated from docs/api/openapi.json (`python scripts/clients.py generate`)."""

from cms_client._generated.models import *  # noqa: F403
