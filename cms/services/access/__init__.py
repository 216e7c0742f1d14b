"""Authorization: who may do what (decisions.md, Identity and tokens and Access rules). Pure: no I/O.

Every path that reads or changes records (single, bulk, CSV, files, webhook deliveries) asks
`check(principal, collection, action)`, and the admin-only operations (collections, audit,
settings, backups) ask `require_admin`; handlers do not decide who may do what. Each API route
declares a `Policy` (who may call it), which the API's one middleware enforces with `authorize`
before the handler runs; the services check again through this module (the admin UI and the
workers call them directly). Webhooks and API keys belong to admin-table users: `require_admin_table`,
`owner_scope` and `manages` decide who manages which.

A collection's five rules (`models.AccessRules`) are None (admins only), "" (everyone) or an
expression of the rule grammar, bound to the request by `filters.rules`. Admins, and API keys of
admins, bypass every rule; any other API key acts as its owner, within its scopes (the API guard
checks the scopes).

This package is the one engine's only door (STYLE rule 4): a rule, a field rule, a client's filter,
search and sort are bound here to one `Cond` tree (`filters.conditions`), which gives both the
MongoDB query of a list (`filters.mongo`) and the in-memory decision for one record, a create or a
realtime event (`filters.predicate`); nothing else imports those back ends. Field rules
(decisions.md, Field rules) are joined to the tree: a field the caller may not see on a record is
left out of it (`FieldView.redact`), a filter or search term on it holds only where it is visible,
and a field whose `view_rule` is null is unknown to everyone but admins.
"""


from cms.services.access.fields import (
    EMAIL_FIELD,
    EVERY_FIELD,
    CallerFields,
    FieldView,
    field_view,
    record_document,
    request_context,
)
from cms.services.access.policies import (
    ADMIN_TABLE_TOKEN_ONLY,
    API_KEY_PATHS,
    AUTH_TYPE,
    COLLECTION_TOKEN_ONLY,
    CREATE,
    DELETE,
    LIST,
    READ_METHODS,
    REALTIME_PATH,
    UPDATE,
    VIEW,
    Policy,
    acts_as_admin,
    authorize,
    manages,
    metrics_token_matches,
    owner_scope,
    require_admin,
    require_admin_or_operator,
    require_admin_table,
    require_api_key_reach,
    require_principal,
)
from cms.services.access.records import (
    Access,
    Condition,
    check,
    check_field_rules,
    check_rules,
    compile_filter,
    draft_access,
    fields_rules_filter_by,
    read_only,
    reads_request_data,
    refused,
    require_writable,
)

__all__ = [
    "ADMIN_TABLE_TOKEN_ONLY", "API_KEY_PATHS", "AUTH_TYPE", "COLLECTION_TOKEN_ONLY", "CREATE", "DELETE",
    "EMAIL_FIELD", "EVERY_FIELD", "LIST", "READ_METHODS", "REALTIME_PATH", "UPDATE", "VIEW", "Access",
    "CallerFields", "Condition", "FieldView", "Policy", "acts_as_admin", "authorize", "check",
    "check_field_rules", "check_rules", "compile_filter", "draft_access", "field_view", "fields_rules_filter_by",
    "manages",
    "metrics_token_matches",
    "owner_scope", "read_only", "reads_request_data", "record_document", "refused", "request_context", "require_admin",
    "require_admin_or_operator", "require_admin_table", "require_api_key_reach", "require_principal",
    "require_writable",
]
