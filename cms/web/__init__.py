"""What the API and the admin UI share: request context (services, client address, request origin),
body and query parsing, the input schemas both load, uploads, file responses and the rate limits
both count. Imports neither `cms.api` nor `cms.admin_ui`."""
