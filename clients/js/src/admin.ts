/**
 * The smaller resources: collections (schema and rules), files attached to records, API keys and
 * settings. Each is a thin set of calls over `CmsClient.send`, shaped as the API answers.
 */
import type { CmsClient } from "./client.js";
import { requestOf, type RequestOptions } from "./request.js";
import { blobName } from "./records.js";
import type {
  ApiKey, ApiKeyCreate, ApiKeyCreated, BaseRecord, Collection, CollectionCreate, CollectionUpdate, FileModel, FileToken, Setting,
  SettingUpdate,
} from "./types.js";

/** Collections: anyone may read what the rules allow; creating, changing and deleting is for admins. */
export class CollectionService {
  private readonly client: CmsClient;

  /** The collections of `client`'s service. */
  constructor(client: CmsClient) {
    this.client = client;
  }

  /** Every collection (a JSON array). */
  list(): Promise<Collection[]> {
    return this.client.send<Collection[]>("/api/v1/collections");
  }

  /** One collection by id; 404 when there is none. */
  getOne(id: string): Promise<Collection> {
    return this.client.send<Collection>(`/api/v1/collections/${encodeURIComponent(id)}`);
  }

  /** Create a collection (`{name, type?: "base"|"auth", schema: [fields], *_rule?}`); 201 with it. */
  create(data: CollectionCreate): Promise<Collection> {
    return this.client.send<Collection>("/api/v1/collections", { method: "POST", body: data });
  }

  /** Change collection `id` (its schema, rules, auth switches). */
  update(id: string, data: CollectionUpdate): Promise<Collection> {
    return this.client.send<Collection>(`/api/v1/collections/${encodeURIComponent(id)}`, { method: "PATCH", body: data });
  }

  /** Delete collection `id` and its records (204). */
  async delete(id: string): Promise<void> {
    await this.client.send<void>(`/api/v1/collections/${encodeURIComponent(id)}`, { method: "DELETE" });
  }
}

/** What `files.getURL` takes: a thumbnail size and format, and a file token (see `getURL`). */
export interface FileUrlOptions {
  thumb?: string;
  format?: "webp" | "avif" | "png" | "jpeg";
  token?: string;
}

/** Files attached to records: upload (multipart), the URL of one, its bytes, delete. */
export class FileService {
  private readonly client: CmsClient;

  /** The files of `client`'s service. */
  constructor(client: CmsClient) {
    this.client = client;
  }

  /** Attach `file` to record `recordId` of `collection` (the right to change that record; at most
   * `max_upload_mb` MiB, default 25): 201 with `{id, filename, content_type, size, field, ...}`.
   * `filename` names a `Blob` that has no name of its own; `field`, a file field: the file is then
   * checked against it and may be set as its value (`update(id, {field: file.id})`). */
  upload(collection: string, recordId: string, file: Blob, filename?: string, field?: string): Promise<FileModel> {
    const form = new FormData();
    form.append("collection", collection);
    form.append("record_id", recordId);
    if (field) {
      form.append("field", field);
    }
    form.append("file", file, filename ?? blobName(file));
    return this.client.send<FileModel>("/api/v1/files", { method: "POST", form });
  }

  /** A file token (`{token, expires}`, 2 minutes, bound to the caller): `?token=` on a file's URL
   * lets an `<img>` show a file of a `protected` field. 401 without credentials. */
  token(options: RequestOptions = {}): Promise<FileToken> {
    return this.client.send<FileToken>("/api/v1/files/token", { method: "POST", ...requestOf(options) });
  }

  /** Just the token string of `token()`: pass it to `getURL(record, fileId, {token})`. */
  async getToken(options: RequestOptions = {}): Promise<string> {
    return (await this.token(options)).token;
  }

  /** The URL of file `fileId` of `record` (an id its file field holds), for `<img src>` or a link; no
   * request is made. `thumb` asks for a thumbnail (`100x100` or one of the field's `thumbs`, e.g.
   * `640x0`, `100x100f`), `format` its format (`webp`, `avif`, `png`, `jpeg`), `token` a file token
   * (`getToken()`), needed for a `protected` field's files since an `<img>` sends no credentials.
   * `""` when `record` or `fileId` is missing (a field with no file). */
  getURL(record: BaseRecord | null | undefined, fileId: string | null | undefined,
    options: FileUrlOptions = {}): string {
    if (!record || !fileId) {
      return "";
    }
    return this.client.buildUrl(`/api/v1/files/${encodeURIComponent(fileId)}`, {
      thumb: options.thumb, format: options.format, token: options.token,
    });
  }

  /** The URL that serves file `id` with its `Content-Type` (for `<img src>` when the record is public;
   * else read it with `download`, which sends the credentials). */
  url(id: string): string {
    return this.client.buildUrl(`/api/v1/files/${encodeURIComponent(id)}`);
  }

  /** The bytes of file `id`, with the client's credentials. */
  download(id: string): Promise<Blob> {
    return this.client.send<Blob>(`/api/v1/files/${encodeURIComponent(id)}`, { responseType: "blob" });
  }

  /** Delete file `id` (the right to change its record; 204). */
  async delete(id: string): Promise<void> {
    await this.client.send<void>(`/api/v1/files/${encodeURIComponent(id)}`, { method: "DELETE" });
  }
}

/** API keys of admin-table users: the secret (`key`, `cms_...`) is in the creation answer only. Use one
 * with `new CmsClient(url, {apiKey})` or `client.useApiKey(key)`. */
export class ApiKeyService {
  private readonly client: CmsClient;

  /** The API keys of `client`'s signed-in admin-table user. */
  constructor(client: CmsClient) {
    this.client = client;
  }

  /** Create a key `{name, scopes: ["read"|"write"], expires_at?}`: 201 with its secret `key`. */
  create(data: ApiKeyCreate): Promise<ApiKeyCreated> {
    return this.client.send<ApiKeyCreated>("/api/v1/api-keys", { method: "POST", body: data });
  }

  /** The caller's keys (an admin sees all), without secrets. */
  list(): Promise<ApiKey[]> {
    return this.client.send<ApiKey[]>("/api/v1/api-keys");
  }

  /** Revoke key `id` (204); requests with it get 401 at once. */
  async delete(id: string): Promise<void> {
    await this.client.send<void>(`/api/v1/api-keys/${encodeURIComponent(id)}`, { method: "DELETE" });
  }
}

/** Settings (admins): every value is read back as a string (`"true"`, `"8"`). */
export class SettingsService {
  private readonly client: CmsClient;

  /** The settings of `client`'s service. */
  constructor(client: CmsClient) {
    this.client = client;
  }

  /** Every setting `{key, value, category}`. */
  list(): Promise<Setting[]> {
    return this.client.send<Setting[]>("/api/v1/settings");
  }

  /** Set one (`value` a boolean, an integer or its string form); 422 for an unknown key or bad value. */
  set(key: SettingUpdate["key"], value: SettingUpdate["value"]): Promise<Setting> {
    return this.client.send<Setting>("/api/v1/settings", { method: "POST", body: { key, value } });
  }
}
