/**
 * The records of one collection (decisions.md, Records; Relations in one request): list, view,
 * create, change, delete, page through everything, bulk changes and CSV. Names and shapes are the
 * API's: a page is `{items, total, page, per_page}`, a write sends `{data: {...}}`.
 */
import type { CollectionAuthService } from "./auth.js";
import type { CmsClient } from "./client.js";
import type { BaseRecord, BulkDeleted, BulkUpdated, CsvImportResult, RecordModel, RecordPage } from "./types.js";

/** The server's largest page (`per_page` above it is clamped); `getFullList` asks for pages of this size. */
export const MAX_PER_PAGE = 100;

/** How the returned records are shaped: `expand` (relation paths, comma-separated, e.g. `author.team`),
 * `fields` (kept keys, e.g. `id,title,expand.author.name`) and `locale` (decisions.md, Localized fields:
 * localized fields in that locale, with its fallbacks; `*` for objects of locale to value; on a write, the
 * locale its values are for). */
export interface ShapeOptions {
  expand?: string;
  fields?: string;
  locale?: string;
  signal?: AbortSignal;
}

/** A list's query: `filter` (e.g. `status=published && views>10`), `sort` (`-created,title`),
 * `search` (words), plus the shape; `skipTotal` answers `total: -1` without counting. */
export interface ListOptions extends ShapeOptions {
  filter?: string;
  sort?: string;
  search?: string;
  skipTotal?: boolean;
}

/** The CSV export's query: `filter`, `sort`, `search`, `locale` (`*`: a column per locale, `title:de`). */
export interface ExportOptions {
  filter?: string;
  sort?: string;
  search?: string;
  locale?: string;
  signal?: AbortSignal;
}

/** Field values of a record to write (without `id`, `created`, `updated`). */
export type RecordData = Record<string, unknown>;

/** Files sent with a write, by file field: one `Blob` (a `File` keeps its name) or several. On a
 * change, `field+` adds them after the field's files instead of replacing them, and `data` may list
 * ids to take out as `"field-": [...]` (decisions.md, Files in records, thumbnails and file tokens). */
export type RecordFiles = Record<string, Blob | Blob[]>;

/** The shape of the answer, and files to send with the write (multipart/form-data, all or nothing). */
export interface WriteOptions extends ShapeOptions {
  files?: RecordFiles;
}

/** The multipart body of a write with files: the `data` part (JSON), then each file part. */
export function recordForm(data: RecordData, files: RecordFiles): FormData {
  const form = new FormData();
  form.append("data", JSON.stringify(data));
  for (const [field, value] of Object.entries(files)) {
    for (const blob of Array.isArray(value) ? value : [value]) {
      form.append(field, blob, blobName(blob));
    }
  }
  return form;
}

/** A `File`'s own name, else `file`. */
export function blobName(blob: Blob, fallback = "file"): string {
  const ownName = (blob as Blob & { name?: unknown }).name;
  return typeof ownName === "string" && ownName ? ownName : fallback;
}

/** The records of one collection; `T` is the record type (default: any record). */
export class RecordService<T extends BaseRecord = RecordModel> {
  /** The collection's name. */
  readonly name: string;
  /** The collection's user system, when it is an auth collection (`authWithPassword`, OTP, 2FA, OAuth2...). */
  readonly auth: CollectionAuthService;
  private readonly client: CmsClient;
  private readonly path: string;

  /** The records of collection `name` on `client`; `auth` is its user system. */
  constructor(client: CmsClient, name: string, auth: CollectionAuthService) {
    this.client = client;
    this.name = name;
    this.auth = auth;
    this.path = `/api/v1/collections/${encodeURIComponent(name)}/records`;
  }

  /** One page: `page` from 1, `perPage` 1..100 (more is clamped to 100). 400 `invalid_filter` for a bad
   * filter, sort or expand; 422 for a bad page. */
  getList(page = 1, perPage = 30, options: ListOptions = {}): Promise<RecordPage<T>> {
    return this.client.send<RecordPage<T>>(this.path, {
      query: {
        page, per_page: perPage, filter: options.filter, sort: options.sort, search: options.search,
        expand: options.expand, fields: options.fields, skip_total: options.skipTotal ? true : undefined,
        locale: options.locale,
      },
      ...signalOf(options),
    });
  }

  /** Every matching record, fetched a page of `MAX_PER_PAGE` at a time (give a `sort` for a stable order
   * while others write). */
  async getFullList(options: Omit<ListOptions, "skipTotal"> = {}): Promise<T[]> {
    const items: T[] = [];
    for (let page = 1; ; page += 1) {
      const answer = await this.getList(page, MAX_PER_PAGE, { ...options, skipTotal: true });
      items.push(...answer.items);
      if (answer.items.length < answer.per_page) {
        return items;
      }
    }
  }

  /** One record by id; 404 `not_found` when it does not exist or the caller may not view it. */
  getOne(id: string, options: ShapeOptions = {}): Promise<T> {
    return this.client.send<T>(`${this.path}/${encodeURIComponent(id)}`, {
      query: { expand: options.expand, fields: options.fields, locale: options.locale }, ...signalOf(options),
    });
  }

  /** Create a record from `data`, with `options.files` in the same request; 201 with it (shaped by
   * `expand`/`fields`). 422 with `errors` per field (a file its field refuses, too: nothing is stored). */
  create(data: RecordData, options: WriteOptions = {}): Promise<T> {
    return this.client.send<T>(this.path, {
      method: "POST", ...bodyOf(data, options), ...signalOf(options),
      query: { expand: options.expand, fields: options.fields, locale: options.locale },
    });
  }

  /** Change some fields of record `id` (and its files, `options.files`); the record as it now is. */
  update(id: string, data: RecordData, options: WriteOptions = {}): Promise<T> {
    return this.client.send<T>(`${this.path}/${encodeURIComponent(id)}`, {
      method: "PATCH", ...bodyOf(data, options), ...signalOf(options),
      query: { expand: options.expand, fields: options.fields, locale: options.locale },
    });
  }

  /** Delete record `id` (204). */
  async delete(id: string, options: { signal?: AbortSignal } = {}): Promise<void> {
    await this.client.send<void>(`${this.path}/${encodeURIComponent(id)}`, { method: "DELETE", ...signalOf(options) });
  }

  /** Set the same `data` on the records `recordIds` (1..1,000 distinct ids), all or nothing: `{updated}`. */
  bulkUpdate(recordIds: string[], data: RecordData): Promise<BulkUpdated> {
    return this.client.send<BulkUpdated>(`${this.path}/bulk-update`, {
      method: "POST", body: { record_ids: recordIds, data },
    });
  }

  /** Delete the records `recordIds` (1..1,000 distinct ids), all or nothing: `{deleted}`. */
  bulkDelete(recordIds: string[]): Promise<BulkDeleted> {
    return this.client.send<BulkDeleted>(`${this.path}/bulk-delete`, { method: "POST", body: { record_ids: recordIds } });
  }

  /** Create records from CSV text or a file (UTF-8, a header row of field names; at most 10 MiB and
   * 50,000 rows): `{imported, failed: [{row, errors}]}` (valid rows are stored). */
  importCsv(csv: string | Blob, filename = "import.csv"): Promise<CsvImportResult> {
    const form = new FormData();
    form.append("file", typeof csv === "string" ? new Blob([csv], { type: "text/csv" }) : csv, filename);
    return this.client.send<CsvImportResult>(`${this.path}/import/csv`, { method: "POST", form });
  }

  /** The matching records as CSV text (a header row, then one row per record). */
  exportCsv(options: ExportOptions = {}): Promise<string> {
    return this.client.send<string>(`${this.path}/export/csv`, {
      query: { filter: options.filter, sort: options.sort, search: options.search, locale: options.locale },
      responseType: "text", ...signalOf(options),
    });
  }
}

/** `{signal}` when the options carry one, else nothing (the request options take no `undefined`). */
/** A write's body: JSON, or multipart when it carries files. */
function bodyOf(data: RecordData, options: WriteOptions): { body: unknown } | { form: FormData } {
  return options.files && Object.keys(options.files).length ? { form: recordForm(data, options.files) }
    : { body: { data } };
}

export function signalOf(options: { signal?: AbortSignal }): { signal?: AbortSignal } {
  return options.signal ? { signal: options.signal } : {};
}
