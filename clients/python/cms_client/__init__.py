"""Typed Python client of the CMS API: `AsyncCmsClient` (httpx, asyncio; realtime over server-sent events) and
`CmsClient` (blocking), with models generated from the service's OpenAPI document (`cms_client.models`).
Its surface is the TypeScript client's in snake_case: `client.auth` (the admin table's sign-in calls),
`client.collection(name)` (records) and `client.collection(name).auth` (an auth collection's user system).

    async with AsyncCmsClient("http://127.0.0.1:8090") as client:
        await client.auth.auth_with_password("admin@example.com", "change-me-now")
        page = await client.collection("posts").get_list(1, 20, expand="author")
"""

from cms_client._async import (
    AsyncApiKeys,
    AsyncAuth,
    AsyncBatch,
    AsyncCmsClient,
    AsyncCollection,
    AsyncCollectionAuth,
    AsyncCollections,
    AsyncFiles,
    AsyncReleases,
    AsyncSchema,
    EventHooks,
)
from cms_client._filter import FilterValue, bind_filter, filter_literal
from cms_client._records import BatchCollection
from cms_client._sync import (
    CmsClient,
    SyncApiKeys,
    SyncAuth,
    SyncBatch,
    SyncCollection,
    SyncCollectionAuth,
    SyncCollections,
    SyncFiles,
    SyncReleases,
    SyncSchema,
)
from cms_client.auth_store import ADMIN_AUTH_PATH, AuthStore, token_claims
from cms_client.errors import BatchError, CmsError, CmsNetworkError
from cms_client.realtime import AsyncRealtime, RealtimeEvent, SyncRealtime, topic_string
from cms_client.shapes import Record, RecordPage

__all__ = [
    "ADMIN_AUTH_PATH", "AsyncApiKeys", "AsyncAuth", "AsyncBatch", "AsyncCmsClient", "AsyncCollection",
    "AsyncCollectionAuth", "AsyncCollections", "AsyncFiles", "AsyncRealtime", "AsyncReleases", "AsyncSchema",
    "AuthStore", "BatchCollection", "BatchError", "CmsClient", "CmsError", "CmsNetworkError", "EventHooks",
    "FilterValue", "RealtimeEvent", "Record", "RecordPage", "SyncApiKeys", "SyncAuth", "SyncBatch", "SyncCollection",
    "SyncCollectionAuth", "SyncCollections", "SyncFiles", "SyncRealtime", "SyncReleases", "SyncSchema",
    "bind_filter", "filter_literal", "token_claims", "topic_string",
]
