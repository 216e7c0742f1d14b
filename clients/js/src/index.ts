/**
 * `cms-client`: the typed client of the CMS API. `new CmsClient(baseUrl, {authStore?, apiKey?})`;
 * see docs/clients/js.md.
 */
export { CmsClient, DEFAULT_REFRESH_MARGIN_S } from "./client.js";
export type { AfterSendHook, BeforeSendHook, CmsClientOptions, QueryValue, RequestOptions, SendOptions } from "./client.js";
export { AuthStore, MemoryStorage, decodeClaims } from "./auth-store.js";
export type { AuthChangeListener, AuthState, AuthStorage, AuthStoreOptions, TokenClaims } from "./auth-store.js";
export { AuthService, CollectionAuthService, authPrefix, parseOAuth2Redirect } from "./auth.js";
export type { OAuth2Completion } from "./auth.js";
export { BatchBuilder, BatchCollection, DEFAULT_BATCH_MAX_REQUESTS } from "./batch.js";
export { ApiKeyService, CollectionService, FileService, SettingsService } from "./admin.js";
export type { FileUrlOptions } from "./admin.js";
export { bindFilter, filterLiteral } from "./filter.js";
export type { FilterValue } from "./filter.js";
export { BatchError, CmsError, CmsNetworkError } from "./errors.js";
export { MAX_EVENT_CHARS, RealtimeService, topicString } from "./realtime.js";
export type { RealtimeCallback, RealtimeEvent, SubscribeOptions, Unsubscribe } from "./realtime.js";
export { MAX_PER_PAGE, RecordService, recordForm } from "./records.js";
export { ReleaseService } from "./releases.js";
export { SchemaService } from "./schema.js";
export type { ApplyOptions, SnapshotInput } from "./schema.js";
export type {
  AggregateOptions, ExportOptions, ListOptions, PublishOptions, ReadOptions, RecordData, RecordFiles, ShapeOptions,
  WriteOptions,
} from "./records.js";
export type * from "./types.js";
export type { components, paths } from "./generated/openapi.js";
