/**
 * `client.batch()`: queue record creates, changes and deletes, then `send()` them as one
 * `POST /api/v1/batch` (decisions.md, Batch writes): in order, in one transaction, all or nothing.
 * Success is the answers in request order; a failure changes nothing and rejects with a `BatchError`
 * whose `failed` names the first failing request (`index` from 0) and the answer it would have got alone.
 */
import type { CmsClient } from "./client.js";
import { BatchError } from "./errors.js";
import type { RecordData, ShapeOptions } from "./records.js";
import type { BatchAnswer, BatchRequest } from "./types.js";

/** The server's default limit of requests in one batch (setting `batch_max_requests`). */
export const DEFAULT_BATCH_MAX_REQUESTS = 50;

/** The queued requests of one collection in a batch. */
export class BatchCollection {
  private readonly builder: BatchBuilder;
  private readonly path: string;

  /** The requests of collection `name`, queued on `builder`. */
  constructor(builder: BatchBuilder, name: string) {
    this.builder = builder;
    this.path = `/api/v1/collections/${encodeURIComponent(name)}/records`;
  }

  /** Queue a create of `data` (answer: 201 and the record). */
  create(data: RecordData, options: Omit<ShapeOptions, "signal" | "requestKey"> = {}): BatchBuilder {
    return this.builder.add({ method: "POST", url: withShape(this.path, options), body: { data } });
  }

  /** Queue a change of record `id` (answer: 200 and the record). */
  update(id: string, data: RecordData, options: Omit<ShapeOptions, "signal" | "requestKey"> = {}): BatchBuilder {
    return this.builder.add({ method: "PATCH", url: withShape(`${this.path}/${encodeURIComponent(id)}`, options),
      body: { data } });
  }

  /** Queue a delete of record `id` (answer: 204, `body: null`). */
  delete(id: string): BatchBuilder {
    return this.builder.add({ method: "DELETE", url: `${this.path}/${encodeURIComponent(id)}` });
  }
}

/** A batch being built; `collection(name)` queues requests, `send()` runs them. */
export class BatchBuilder {
  /** The queued requests, in order. */
  readonly requests: BatchRequest[] = [];
  private readonly client: CmsClient;

  /** An empty batch sent through `client`. */
  constructor(client: CmsClient) {
    this.client = client;
  }

  /** Queue requests on the records of collection `name`. */
  collection(name: string): BatchCollection {
    return new BatchCollection(this, name);
  }

  /** Queue one raw request (`{method, url, body?}`); returns the builder. */
  add(request: BatchRequest): BatchBuilder {
    this.requests.push(request);
    return this;
  }

  /** Run the queued requests: the answers `{status, body}` in request order. Rejects with `BatchError`
   * (400 with `failed`, nothing changed; 422 over the limit) or another `CmsError`. */
  send(options: { signal?: AbortSignal } = {}): Promise<BatchAnswer[]> {
    return this.client.send<BatchAnswer[]>("/api/v1/batch", {
      method: "POST", body: { requests: this.requests }, error: (status, body) => new BatchError(status, body),
      ...(options.signal ? { signal: options.signal } : {}),
    });
  }
}

function withShape(path: string, options: Omit<ShapeOptions, "signal" | "requestKey">): string {
  const params = new URLSearchParams();
  if (options.expand) {
    params.set("expand", options.expand);
  }
  if (options.fields) {
    params.set("fields", options.fields);
  }
  if (options.locale) {
    params.set("locale", options.locale);
  }
  const search = params.toString();
  return search ? `${path}?${search}` : path;
}
