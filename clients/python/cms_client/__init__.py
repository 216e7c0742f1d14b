"""Typed Python client of the CMS API: `AsyncCmsClient` (httpx, asyncio; realtime over server-sent events) and
`CmsClient` (blocking), with models generated from the service's OpenAPI document (`cms_client.models`).

    async with AsyncCmsClient("http://127.0.0.1:8090") as client:
        await client.admins.auth_with_password("admin@example.com", "change-me-now")
        page = await client.collection("posts").get_list(1, 20, expand="author")
"""

from cms_client._async import AsyncApiKeys, AsyncAuth, AsyncBatch, AsyncCmsClient, AsyncCollection, AsyncFiles
from cms_client._sync import CmsClient, SyncApiKeys, SyncAuth, SyncBatch, SyncCollection, SyncFiles
from cms_client.auth_store import ADMIN_AUTH_PATH, AuthStore, token_claims
from cms_client.errors import CmsError, NetworkError
from cms_client.realtime import AsyncRealtime, RealtimeEvent, topic_key
from cms_client.shapes import Record, RecordPage

__all__ = [
    "ADMIN_AUTH_PATH", "AsyncApiKeys", "AsyncAuth", "AsyncBatch", "AsyncCmsClient", "AsyncCollection", "AsyncFiles",
    "AsyncRealtime", "AuthStore", "CmsClient", "CmsError", "NetworkError", "RealtimeEvent", "Record", "RecordPage",
    "SyncApiKeys", "SyncAuth", "SyncBatch", "SyncCollection", "SyncFiles", "token_claims", "topic_key",
]
