/**
 * The records of one collection (decisions.md, Records; Relations in one request): list, view,
 * create, change, delete, page through everything, bulk changes and CSV. Names and shapes are the
 * API's: a page is `{items, total, page, per_page}`, a write sends `{data: {...}}`.
 */
import type { CollectionAuthService } from "./auth.js";
import type { CmsClient } from "./client.js";
import { requestOf, type RequestOptions } from "./request.js";
import { CmsError } from "./errors.js";
import type {
  AggregatePage, BaseRecord, BulkDeleted, BulkUpdated, CsvImportResult, RecordModel, RecordPage, RecordVersion,
  RecordVersionPage,
} from "./types.js";

/** The server's largest page (`per_page` above it is clamped); `getFullList` asks for pages of this size. */
export const MAX_PER_PAGE = 100;

/** How the returned records are shaped: `expand` (relation paths, comma-separated, e.g. `author.team`),
 * `fields` (kept keys, e.g. `id,title,expand.author.name`) and `locale` (decisions.md, Localized fields:
 * localized fields in that locale, with its fallbacks; `*` for objects of locale to value; on a write, the
 * locale its values are for). */
export interface ShapeOptions extends RequestOptions {
  expand?: string;
  fields?: string;
  locale?: string;
}

/** A read's shape, plus `draft`: `true` reads the working copies (decisions.md, Drafts, versions and
 * scheduled publishing): the working copy where there is one, else the published copy, of the records
 * the caller may update (403 on a view without that right, 401 without credentials). */
export interface ReadOptions extends ShapeOptions {
  draft?: boolean;
}

/** A list's query: `filter` (e.g. `status=published && views>10`), `sort` (`-created,title`),
 * `search` (words), plus the shape; `skipTotal` answers `total: -1` without counting. */
export interface ListOptions extends ReadOptions {
  filter?: string;
  sort?: string;
  search?: string;
  skipTotal?: boolean;
}

/** The CSV export's query: `filter`, `sort`, `search`, `locale` (`*`: a column per locale, `title:de`). */
export interface ExportOptions extends RequestOptions {
  filter?: string;
  sort?: string;
  search?: string;
  locale?: string;
}

/** `publish`'s options: `at` schedules the publish instead (a `Date` or ISO 8601 text, in the future;
 * naive text means UTC), `locale` publishes only that locale's values of localized fields. */
export interface PublishOptions extends ShapeOptions {
  at?: Date | string | null;
}

/** An aggregation's query, named as the API's (decisions.md, Aggregation and view collections):
 * `groupBy` (`group_by`: comma-separated fields, a date field may add `:year`, `:month`, `:day`, `:hour`),
 * `aggregates` (`count()`, `count_distinct(f)`, `sum(f)`, `avg(f)`, `min(f)`, `max(f)`, comma-separated),
 * `filter`, `sort` (group keys or aggregate names, e.g. `-sum_views`), `page`, `perPage`. */
export interface AggregateOptions extends RequestOptions {
  groupBy?: string;
  aggregates?: string;
  filter?: string;
  sort?: string;
  page?: number;
  perPage?: number;
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
   * filter, sort or expand; 422 for a bad page. Build a filter with values by `client.filter`. */
  getList(page = 1, perPage = 30, options: ListOptions = {}): Promise<RecordPage<T>> {
    return this.client.send<RecordPage<T>>(this.path, {
      query: {
        page, per_page: perPage, filter: options.filter, sort: options.sort, search: options.search,
        expand: options.expand, fields: options.fields, skip_total: options.skipTotal ? true : undefined,
        locale: options.locale, draft: options.draft ? true : undefined,
      },
      ...requestOf(options),
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

  /** The first record matching `filter` (in `options.sort` order): rejects with a 404 `not_found`
   * `CmsError` when none does. `getFirstListItem(client.filter("slug = {:s}", {s}))`. */
  async getFirstListItem(filter: string, options: Omit<ListOptions, "filter" | "skipTotal"> = {}): Promise<T> {
    const answer = await this.getList(1, 1, { ...options, filter, skipTotal: true });
    const first = answer.items[0];
    if (first === undefined) {
      throw new CmsError(404, { code: "not_found", detail: `No record of ${this.name} matches the filter` });
    }
    return first;
  }

  /** One record by id (`draft: true`: its working copy); 404 `not_found` when it does not exist or the
   * caller may not view it. */
  getOne(id: string, options: ReadOptions = {}): Promise<T> {
    return this.client.send<T>(this.recordPath(id), {
      query: { ...shapeQuery(options), draft: options.draft ? true : undefined }, ...requestOf(options),
    });
  }

  /** Create a record from `data`, with `options.files` in the same request; 201 with it (shaped by
   * `expand`/`fields`). 422 with `errors` per field (a file its field refuses, too: nothing is stored). */
  create(data: RecordData, options: WriteOptions = {}): Promise<T> {
    return this.client.send<T>(this.path, {
      method: "POST", ...bodyOf(data, options), ...requestOf(options), query: shapeQuery(options),
    });
  }

  /** Change some fields of record `id` (and its files, `options.files`); the record as it now is. */
  update(id: string, data: RecordData, options: WriteOptions = {}): Promise<T> {
    return this.client.send<T>(this.recordPath(id), {
      method: "PATCH", ...bodyOf(data, options), ...requestOf(options), query: shapeQuery(options),
    });
  }

  /** Delete record `id` (204). */
  async delete(id: string, options: RequestOptions = {}): Promise<void> {
    await this.client.send<void>(this.recordPath(id), { method: "DELETE", ...requestOf(options) });
  }

  /** Publish record `id`'s working copy now (collections with drafts; the update rule): 200 with the
   * record; 422 `validation_error` when it does not validate (nothing changes). `at` schedules the publish
   * instead (it must be in the future, else 422; replaces a pending schedule; the answer has `scheduled_at`);
   * `locale` publishes only that locale's values of localized fields. */
  publish(id: string, options: PublishOptions = {}): Promise<T> {
    const at = options.at instanceof Date ? options.at.toISOString() : options.at;
    return this.client.send<T>(`${this.recordPath(id)}/publish`, {
      method: "POST", body: at ? { at } : {}, query: shapeQuery(options), ...requestOf(options),
    });
  }

  /** Turn published record `id` back into a `draft` (its content kept as the working copy): 200 with it. */
  unpublish(id: string, options: ShapeOptions = {}): Promise<T> {
    return this.client.send<T>(`${this.recordPath(id)}/unpublish`, {
      method: "POST", query: shapeQuery(options), ...requestOf(options),
    });
  }

  /** Drop record `id`'s pending working copy (204; 404 when there is none). */
  async discardDraft(id: string, options: RequestOptions = {}): Promise<void> {
    await this.client.send<void>(`${this.recordPath(id)}/draft`, { method: "DELETE", ...requestOf(options) });
  }

  /** Cancel record `id`'s pending scheduled publish (204; 404 when there is none). */
  async cancelSchedule(id: string, options: RequestOptions = {}): Promise<void> {
    await this.client.send<void>(`${this.recordPath(id)}/schedule`, { method: "DELETE", ...requestOf(options) });
  }

  /** Record `id`'s kept versions, newest first: `{items: [{version, created, by, data}], total, page,
   * per_page}` (the view rule; collections with `versions` > 0). */
  listVersions(id: string, page = 1, perPage = 30, options: RequestOptions = {}): Promise<RecordVersionPage> {
    return this.client.send<RecordVersionPage>(`${this.recordPath(id)}/versions`, {
      query: { page, per_page: perPage }, ...requestOf(options),
    });
  }

  /** Version `version` (from 1) of record `id`; 404 when it is not kept. */
  getVersion(id: string, version: number, options: RequestOptions = {}): Promise<RecordVersion> {
    return this.client.send<RecordVersion>(`${this.recordPath(id)}/versions/${encodeURIComponent(version)}`,
      requestOf(options));
  }

  /** Write version `version`'s data over record `id` (as the working copy with drafts, else as an update,
   * validated like one; the update rule): 200 with the record. */
  restoreVersion(id: string, version: number, options: ShapeOptions = {}): Promise<T> {
    return this.client.send<T>(`${this.recordPath(id)}/versions/${encodeURIComponent(version)}/restore`, {
      method: "POST", query: shapeQuery(options), ...requestOf(options),
    });
  }

  /** Groups of the records a list shows the caller (see `AggregateOptions`): `{items: [{key, count,
   * sum_views, ...}], total (groups), page, per_page}`. 400 `invalid_filter` for a bad name or a
   * non-numeric field in `sum`/`avg`; 503 past the server's time limit. */
  aggregate(options: AggregateOptions = {}): Promise<AggregatePage> {
    return this.client.send<AggregatePage>(`/api/v1/collections/${encodeURIComponent(this.name)}/aggregate`, {
      query: {
        group_by: options.groupBy, aggregates: options.aggregates, filter: options.filter, sort: options.sort,
        page: options.page, per_page: options.perPage,
      },
      ...requestOf(options),
    });
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
      responseType: "text", ...requestOf(options),
    });
  }

  private recordPath(id: string): string {
    return `${this.path}/${encodeURIComponent(id)}`;
  }
}

/** The `expand`, `fields` and `locale` query of a shape. */
function shapeQuery(options: ShapeOptions): Record<string, string | undefined> {
  return { expand: options.expand, fields: options.fields, locale: options.locale };
}

/** A write's body: JSON, or multipart when it carries files. */
function bodyOf(data: RecordData, options: WriteOptions): { body: unknown } | { form: FormData } {
  return options.files && Object.keys(options.files).length ? { form: recordForm(data, options.files) }
    : { body: { data } };
}
