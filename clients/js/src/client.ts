/**
 * `CmsClient`: one base URL, one auth store, one `send` that every call goes through. `send` adds the
 * credentials (the store's access token as `Authorization: Bearer`, or an API key as `X-API-Key`),
 * turns error answers into `CmsError` and unanswered requests into `CmsNetworkError`, and after a
 * 401 for a spent access token refreshes once and retries once. Refreshing also happens shortly
 * before the access token's `exp`, and there is never more than one refresh in flight: every caller
 * awaits the same promise, because presenting a spent refresh token again revokes the whole session
 * (decisions.md, Identity and tokens). `beforeSend` and `afterSend` hooks see every request and answer;
 * a call may be aborted by its `signal` or cancelled by a later call with the same `requestKey`
 * (auto-cancellation is opt-in: `autoCancellation(true)`).
 */
import { AuthStore } from "./auth-store.js";
import { AuthService, CollectionAuthService, authPrefix } from "./auth.js";
import { BatchBuilder } from "./batch.js";
import { ApiKeyService, CollectionService, FileService, SettingsService } from "./admin.js";
import { CmsError, CmsNetworkError } from "./errors.js";
import { bindFilter, type FilterValue } from "./filter.js";
import type { RequestOptions } from "./request.js";
import { RealtimeService } from "./realtime.js";
import { RecordService } from "./records.js";
import { ReleaseService } from "./releases.js";
import { SchemaService } from "./schema.js";
import type { BaseRecord, Health, RecordModel, TokenPair } from "./types.js";

export type { RequestOptions } from "./request.js";

/** Refresh this long before the access token's `exp` (or at half its remaining life, if sooner). */
export const DEFAULT_REFRESH_MARGIN_S = 60;
/** The longest delay `setTimeout` takes (2^31 - 1 ms); a later refresh is re-planned when it fires. */
const MAX_TIMER_MS = 2_147_483_647;
/** 401 codes that mean "the access token no longer works" (a refresh may help); others, such as
 * `invalid_credentials` for a wrong password, do not. */
const REFRESHABLE_CODES = new Set(["unauthorized", "token_expired"]);

/** A value of a query parameter; `undefined`, `null` and `""` leave the parameter out. */
export type QueryValue = string | number | boolean | null | undefined;

/** Options of `new CmsClient(baseUrl, options)`. */
export interface CmsClientOptions {
  /** The auth store; default a new in-memory `AuthStore`. */
  authStore?: AuthStore;
  /** Act with this API key (`X-API-Key`) instead of the auth store's token. */
  apiKey?: string | null;
  /** The `fetch` to use; default the platform's `globalThis.fetch`. */
  fetch?: typeof fetch;
  /** Seconds before the access token's `exp` at which it is refreshed on its own; default 60. */
  refreshMarginS?: number;
}

/** `client.beforeSend`: sees (and may replace) each request's absolute `url` and its `RequestInit`
 * (method, headers as a plain object, body) before it goes out; returning nothing keeps them. */
export type BeforeSendHook = (url: string, init: RequestInit) =>
  { url?: string; init?: RequestInit } | void | Promise<{ url?: string; init?: RequestInit } | void>;

/** `client.afterSend`: sees each answer read by `send` (success or error) and its parsed body (JSON
 * value, text or Blob); what it returns is the body the call resolves with (or the error is built from). */
export type AfterSendHook = (response: Response, data: unknown) => unknown;

/** Options of one `send`. */
export interface SendOptions extends RequestOptions {
  /** HTTP method; default GET. */
  method?: string;
  /** Query parameters; `undefined`/`null`/`""` values are left out. */
  query?: Record<string, QueryValue>;
  /** A JSON body (serialized here). */
  body?: unknown;
  /** A multipart body, sent as is (the platform sets its boundary). */
  form?: FormData;
  /** Extra request headers. */
  headers?: Record<string, string>;
  /** `false`: send no credentials and never refresh (login, refresh, register...). Default true. */
  auth?: boolean;
  /** How to read a 2xx answer: `json` (default; 204 gives `undefined`), `text`, `blob`. */
  responseType?: "json" | "text" | "blob";
  /** Builds the error of a non-2xx answer; default `new CmsError(status, body)`. */
  error?: (status: number, body: unknown) => CmsError;
}

/** The client; see the module comment. `new CmsClient("http://127.0.0.1:8090")`. */
export class CmsClient {
  /** The service's base URL, without a trailing slash. */
  readonly baseUrl: string;
  /** Who the client acts for. */
  readonly authStore: AuthStore;
  /** The admin table's user system (`/api/v1/auth/...`). */
  readonly auth: AuthService;
  /** Collections (admin only for writes). */
  readonly collections: CollectionService;
  /** Files attached to records. */
  readonly files: FileService;
  /** API keys of admin-table users. */
  readonly apiKeys: ApiKeyService;
  /** Settings (admins). */
  readonly settings: SettingsService;
  /** Realtime subscriptions over one server-sent-events stream. */
  readonly realtime: RealtimeService;
  /** Releases: records published together (admins). */
  readonly releases: ReleaseService;
  /** Schema as code: export, diff, apply (admins). */
  readonly schema: SchemaService;
  /** Called before each request goes out (see `BeforeSendHook`); `undefined`: none. */
  beforeSend: BeforeSendHook | undefined = undefined;
  /** Called with each answer `send` reads (see `AfterSendHook`); `undefined`: none. */
  afterSend: AfterSendHook | undefined = undefined;

  private apiKeyValue: string | null;
  private readonly fetchImpl: typeof fetch;
  private readonly refreshMarginMs: number;
  private readonly recordServices = new Map<string, RecordService<RecordModel>>();
  private refreshing: Promise<TokenPair> | null = null;
  private refreshTimer: ReturnType<typeof setTimeout> | undefined;
  private readonly stopWatchingStore: () => void;
  private autoCancelOn = false;
  private readonly pending = new Map<string, AbortController>();

  /** A client of the service at `baseUrl` (e.g. `http://127.0.0.1:8090`). */
  constructor(baseUrl: string, options: CmsClientOptions = {}) {
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    this.authStore = options.authStore ?? new AuthStore();
    this.apiKeyValue = options.apiKey ?? null;
    this.fetchImpl = options.fetch ?? ((input, init) => globalThis.fetch(input, init));
    this.refreshMarginMs = (options.refreshMarginS ?? DEFAULT_REFRESH_MARGIN_S) * 1000;
    this.auth = new AuthService(this, null);
    this.collections = new CollectionService(this);
    this.files = new FileService(this);
    this.apiKeys = new ApiKeyService(this);
    this.settings = new SettingsService(this);
    this.realtime = new RealtimeService(this);
    this.releases = new ReleaseService(this);
    this.schema = new SchemaService(this);
    this.stopWatchingStore = this.authStore.onChange(() => this.planRefresh(), true);
  }

  /** The records of collection `name` (and, for an auth collection, its user system as `.auth`).
   * `T` types the records: `client.collection<Post>("posts")`. */
  collection<T extends BaseRecord = RecordModel>(name: string): RecordService<T> {
    let service = this.recordServices.get(name);
    if (!service) {
      service = new RecordService<RecordModel>(this, name, new CollectionAuthService(this, name));
      this.recordServices.set(name, service);
    }
    return service as unknown as RecordService<T>;
  }

  /** `expr` with each `{:name}` placeholder replaced by `params[name]` written as a literal of the
   * filter grammar (strings quoted and escaped, numbers, booleans, `null`, a `Date` as ISO 8601), so that
   * no value can change the expression: `client.filter("title = {:t} && views > {:n}", {t, n: 10})`.
   * Throws for a placeholder `params` lacks and for a value with no literal (an object, `NaN`). */
  filter(expr: string, params: Record<string, FilterValue> = {}): string {
    return bindFilter(expr, params);
  }

  /** Opt in (`true`) or out (`false`, the default) of auto-cancellation for every GET: each gets the
   * key `GET <path>`, so a new GET of the same path aborts the one still pending (a list refetched as
   * the user types). A call's own `requestKey` wins; `requestKey: null` opts one call out. */
  autoCancellation(enable: boolean): void {
    this.autoCancelOn = enable;
  }

  /** Abort the pending call with `requestKey` `key`, if any (it rejects with `isAbort` true). */
  cancelRequest(key: string): void {
    this.pending.get(key)?.abort();
    this.pending.delete(key);
  }

  /** Abort every pending call that has a request key. */
  cancelAllRequests(): void {
    for (const controller of this.pending.values()) {
      controller.abort();
    }
    this.pending.clear();
  }

  /** A new batch: queue creates, changes and deletes, then `send()` them as one all-or-nothing request. */
  batch(): BatchBuilder {
    return new BatchBuilder(this);
  }

  /** `GET /health`: `{status, mongodb, redis, version}`. */
  health(): Promise<Health> {
    return this.send<Health>("/health", { auth: false });
  }

  /** The API key the client acts with, or `null` (then the auth store's token is used). */
  get apiKey(): string | null {
    return this.apiKeyValue;
  }

  /** Act with `key` (`X-API-Key`) from now on, or with the auth store's token again (`null`). */
  useApiKey(key: string | null): void {
    this.apiKeyValue = key;
    this.planRefresh();
    this.realtime.credentialsChanged();
  }

  /** The absolute URL of `path` with `query` (values `undefined`/`null`/`""` left out). */
  buildUrl(path: string, query: Record<string, QueryValue> = {}): string {
    const params = new URLSearchParams();
    for (const [name, value] of Object.entries(query)) {
      if (value !== undefined && value !== null && value !== "") {
        params.append(name, String(value));
      }
    }
    const search = params.toString();
    return `${this.baseUrl}${path}${search ? `?${search}` : ""}`;
  }

  /** The headers that carry the client's credentials now (`X-API-Key` or `Authorization`), possibly none. */
  credentialHeaders(): Record<string, string> {
    if (this.apiKeyValue) {
      return { "X-API-Key": this.apiKeyValue };
    }
    return this.authStore.token ? { Authorization: `Bearer ${this.authStore.token}` } : {};
  }

  /** Send one request to `path` (e.g. `/api/v1/collections`) and read its answer (see `SendOptions`).
   * Rejects with `CmsError` (an error answer) or `CmsNetworkError` (no answer; `isAbort` when aborted or
   * cancelled). A 401 for an access token that no longer works is followed by one refresh (shared with
   * concurrent callers) and one retry. A call with a `requestKey` (or a GET under `autoCancellation(true)`)
   * first cancels the pending call with the same key. */
  async send<T>(path: string, options: SendOptions = {}): Promise<T> {
    const method = (options.method ?? "GET").toUpperCase();
    const key = options.requestKey !== undefined ? options.requestKey
      : (this.autoCancelOn && method === "GET" ? `GET ${path}` : null);
    if (key === null) {
      return this.sendOnce<T>(path, options);
    }
    this.cancelRequest(key);
    const controller = new AbortController();
    this.pending.set(key, controller);
    const outer = options.signal;
    const forward = (): void => controller.abort(outer?.reason);
    if (outer?.aborted) {
      forward();
    }
    outer?.addEventListener("abort", forward, { once: true });
    try {
      return await this.sendOnce<T>(path, { ...options, signal: controller.signal });
    } finally {
      outer?.removeEventListener("abort", forward);
      if (this.pending.get(key) === controller) {
        this.pending.delete(key);
      }
    }
  }

  private async sendOnce<T>(path: string, options: SendOptions): Promise<T> {
    const withAuth = options.auth !== false;
    const sentToken = withAuth && !this.apiKeyValue ? this.authStore.token : "";
    let response = await this.fetchOnce(path, options, withAuth);
    if (response.status === 401 && sentToken && (await this.renewAfter401(response, sentToken))) {
      response = await this.fetchOnce(path, options, withAuth);
    }
    return this.read<T>(response, options);
  }

  /** The raw `Response` of a GET with the client's credentials (no refresh, no error handling);
   * realtime reads its stream through this. Rejects with `CmsNetworkError` only. */
  async openStream(path: string, query: Record<string, QueryValue>, headers: Record<string, string>,
    signal: AbortSignal): Promise<Response> {
    return this.fetchOnce(path, { query, headers, signal }, false);
  }

  /** Spend the refresh token for a new pair and save it (rotation). Concurrent callers share one
   * request. A refused refresh (4xx other than 429) clears the auth store: the session is over.
   * Rejects with `CmsError` (401 `unauthorized` when the store holds no refresh token). */
  refresh(): Promise<TokenPair> {
    if (!this.refreshing) {
      this.refreshing = this.refreshOnce().finally(() => {
        this.refreshing = null;
      });
    }
    return this.refreshing;
  }

  /** Stop the client's timers and its realtime stream (subscriptions are dropped). */
  close(): void {
    clearTimeout(this.refreshTimer);
    this.stopWatchingStore();
    this.realtime.close();
  }

  private async refreshOnce(): Promise<TokenPair> {
    const store = this.authStore;
    const refreshToken = store.refreshToken;
    if (!refreshToken) {
      throw new CmsError(401, { code: "unauthorized", detail: "The auth store holds no refresh token" });
    }
    try {
      const pair = await this.send<TokenPair>(`${authPrefix(store.collection)}/refresh`, {
        method: "POST", body: { refresh_token: refreshToken }, auth: false,
      });
      if (store.refreshToken === refreshToken) {  // not signed out or in again meanwhile
        store.save(pair.access_token, pair.refresh_token);
      }
      return pair;
    } catch (error) {
      if (error instanceof CmsError && error.status >= 400 && error.status < 500 && error.status !== 429
        && store.refreshToken === refreshToken) {
        store.clear();
      }
      throw error;
    }
  }

  /** After a 401 to a request sent with `sentToken`: whether a retry may now succeed. */
  private async renewAfter401(response: Response, sentToken: string): Promise<boolean> {
    const body = await response.clone().json().catch(() => null) as { code?: unknown } | null;
    if (!REFRESHABLE_CODES.has(String(body?.code)) || this.apiKeyValue) {
      return false;
    }
    if (this.authStore.token !== sentToken) {  // another caller refreshed (or signed in) meanwhile
      return this.authStore.token !== "";
    }
    if (!this.authStore.refreshToken) {
      return false;
    }
    try {
      await this.refresh();
      return true;
    } catch {
      return false;
    }
  }

  private async fetchOnce(path: string, options: SendOptions, withAuth: boolean): Promise<Response> {
    let url = this.buildUrl(path, options.query);
    const headers: Record<string, string> = { Accept: "application/json", ...(withAuth ? this.credentialHeaders() : {}) };
    let body: BodyInit | undefined;
    if (options.form) {
      body = options.form;
    } else if (options.body !== undefined) {
      body = JSON.stringify(options.body);
      headers["Content-Type"] = "application/json";
    }
    Object.assign(headers, options.headers);
    let init: RequestInit = { method: options.method ?? "GET", headers };
    if (body !== undefined) {
      init.body = body;
    }
    if (options.signal) {
      init.signal = options.signal;
    }
    if (this.beforeSend) {
      const changed = await this.beforeSend(url, init);
      url = changed?.url ?? url;
      init = changed?.init ?? init;
    }
    try {
      return await this.fetchImpl(url, init);
    } catch (error) {
      throw new CmsNetworkError(url, error, options.signal?.aborted === true);
    }
  }

  private async read<T>(response: Response, options: SendOptions): Promise<T> {
    let parsed: unknown = null;
    try {
      if (response.ok && options.responseType === "blob") {
        parsed = await response.blob();
      } else {
        parsed = parseBody(await response.text(), response, options);
      }
    } catch (error) {
      throw new CmsNetworkError(response.url, error, options.signal?.aborted === true);
    }
    if (this.afterSend) {
      parsed = await this.afterSend(response, parsed);
    }
    if (!response.ok) {
      throw (options.error ?? ((status, errorBody) => new CmsError(status, errorBody)))(response.status, parsed);
    }
    return parsed as T;
  }

  /** Plan the refresh before the access token's `exp`: at `exp - min(margin, half the time left)`.
   * An expired token is not refreshed here: the next request's 401 does it. */
  private planRefresh(): void {
    clearTimeout(this.refreshTimer);
    this.refreshTimer = undefined;
    const exp = this.authStore.claims?.exp;
    if (this.apiKeyValue || !this.authStore.refreshToken || typeof exp !== "number") {
      return;
    }
    const leftMs = exp * 1000 - Date.now();
    if (leftMs <= 0) {
      return;
    }
    const refreshAt = Date.now() + leftMs - Math.min(this.refreshMarginMs, leftMs / 2);
    const token = this.authStore.token;
    const wake = (): void => {
      const waitMs = refreshAt - Date.now();
      if (waitMs > 0) {
        this.refreshTimer = unrefTimer(setTimeout(wake, Math.min(waitMs, MAX_TIMER_MS)));
      } else if (this.authStore.token === token) {
        this.refresh().catch(() => undefined);  // a failure is met again by the next request's 401
      }
    };
    wake();
  }
}

/** An answer's text as the call reads it: as is (`responseType: "text"`), else parsed JSON (a 204 or an
 * empty body: `undefined` on success, `null` on error; text that is not JSON: kept on success, else `null`). */
function parseBody(text: string, response: Response, options: SendOptions): unknown {
  if (response.ok && options.responseType === "text") {
    return text;
  }
  if (!text || response.status === 204) {
    return response.ok ? undefined : null;
  }
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return response.ok ? text : null;
  }
}

/** Let a Node process exit while only this timer is pending (a no-op in browsers). */
export function unrefTimer(timer: ReturnType<typeof setTimeout>): ReturnType<typeof setTimeout> {
  (timer as unknown as { unref?: () => void }).unref?.();
  return timer;
}
