/**
 * `client.releases`: releases (decisions.md, Drafts, versions and scheduled publishing), for admins: a
 * named set of records of collections with drafts whose working copies are published together, all or
 * nothing, now or at a time.
 */
import type { CmsClient } from "./client.js";
import { requestOf, type RequestOptions } from "./request.js";
import type { Release, ReleaseInput, ReleasePage, ReleaseUpdate } from "./types.js";

const RELEASES = "/api/v1/releases";

/** The releases endpoints (admin only: 401/403 otherwise). */
export class ReleaseService {
  private readonly client: CmsClient;

  /** The releases of `client`'s service. */
  constructor(client: CmsClient) {
    this.client = client;
  }

  /** One page of releases, newest first: `{items, total, page, per_page}` (`perPage` 1..100). */
  list(page = 1, perPage = 30, options: RequestOptions = {}): Promise<ReleasePage> {
    return this.client.send<ReleasePage>(RELEASES, { query: { page, per_page: perPage }, ...requestOf(options) });
  }

  /** One release by id; 404 when there is none. */
  getOne(id: string, options: RequestOptions = {}): Promise<Release> {
    return this.client.send<Release>(this.path(id), requestOf(options));
  }

  /** Create a release `{name, items: [{collection, record_id}]}` (at most 1,000 items): 201 with it. */
  create(data: ReleaseInput, options: RequestOptions = {}): Promise<Release> {
    return this.client.send<Release>(RELEASES, { method: "POST", body: data, ...requestOf(options) });
  }

  /** Rename release `id` or replace its `items`; 409 once it is published. */
  update(id: string, data: ReleaseUpdate, options: RequestOptions = {}): Promise<Release> {
    return this.client.send<Release>(this.path(id), { method: "PATCH", body: data, ...requestOf(options) });
  }

  /** Delete release `id` and its schedule (204); its records keep their working copies. */
  async delete(id: string, options: RequestOptions = {}): Promise<void> {
    await this.client.send<void>(this.path(id), { method: "DELETE", ...requestOf(options) });
  }

  /** Publish every item's working copy at once, all or nothing: 200 with the release; 422
   * `validation_error` naming a failing item by index (`items.3`), nothing published; 409 once published.
   * `at` (a `Date` or ISO 8601 text, in the future) schedules it instead, as a record's publish. */
  publish(id: string, options: RequestOptions & { at?: Date | string | null } = {}): Promise<Release> {
    const at = options.at instanceof Date ? options.at.toISOString() : options.at;
    return this.client.send<Release>(`${this.path(id)}/publish`, {
      method: "POST", body: at ? { at } : {}, ...requestOf(options),
    });
  }

  /** Cancel release `id`'s pending scheduled publish (204; 404 when there is none). */
  async cancelSchedule(id: string, options: RequestOptions = {}): Promise<void> {
    await this.client.send<void>(`${this.path(id)}/schedule`, { method: "DELETE", ...requestOf(options) });
  }

  private path(id: string): string {
    return `${RELEASES}/${encodeURIComponent(id)}`;
  }
}
