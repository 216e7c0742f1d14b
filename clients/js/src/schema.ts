/**
 * `client.schema`: schema as code (decisions.md, Schema as code), for admins: export the snapshot, diff
 * a snapshot against the instance, apply it all or nothing against the hash the diff was made against.
 */
import type { CmsClient } from "./client.js";
import { requestOf, type RequestOptions } from "./request.js";
import type { SchemaDiff, SchemaSnapshot } from "./types.js";

/** A snapshot to diff or apply: `GET /schema`'s shape (`hash` is not needed); a field may carry
 * `renamed_from` to keep a stored field's values under its new name. */
export type SnapshotInput = Omit<SchemaSnapshot, "hash"> & { hash?: string };

/** `apply`'s options: `hash`, the one `diff` answered (409 `conflict` if the schema changed since; when
 * absent a diff is run first and its hash used, which gives up that check), and `allowDataLoss` to accept
 * changes the diff marks `data_loss`. */
export interface ApplyOptions extends RequestOptions {
  hash?: string;
  allowDataLoss?: boolean;
}

/** The schema endpoints (admin only: 401/403 otherwise). */
export class SchemaService {
  private readonly client: CmsClient;

  /** The schema of `client`'s service. */
  constructor(client: CmsClient) {
    this.client = client;
  }

  /** The snapshot `{format: 1, hash, collections}`: every collection by name, relations by name, the
   * same bytes and hash for the same schema on any instance. 409 while an apply runs. */
  export(options: RequestOptions = {}): Promise<SchemaSnapshot> {
    return this.client.send<SchemaSnapshot>("/api/v1/schema", requestOf(options));
  }

  /** What applying `snapshot` would change: `{hash (the current one), changes: [{op, collection, field,
   * from, to, data_loss}]}`; an empty list when nothing would. 422 for a snapshot that is not valid. */
  diff(snapshot: SnapshotInput, options: RequestOptions = {}): Promise<SchemaDiff> {
    return this.client.send<SchemaDiff>("/api/v1/schema/diff", { method: "POST", body: snapshot, ...requestOf(options) });
  }

  /** Apply `snapshot`, every change or none: the new snapshot. 409 `conflict` when the schema's hash is no
   * longer `options.hash`; 422 `validation_error` listing the changes with `data_loss` unless
   * `allowDataLoss`, or for a snapshot that is not valid. */
  async apply(snapshot: SnapshotInput, options: ApplyOptions = {}): Promise<SchemaSnapshot> {
    const hash = options.hash ?? (await this.diff(snapshot, requestOf(options))).hash;
    return this.client.send<SchemaSnapshot>("/api/v1/schema/apply", {
      method: "POST", body: { hash, snapshot, allow_data_loss: options.allowDataLoss ?? false }, ...requestOf(options),
    });
  }
}
