/**
 * The client's errors. Every answer of the API outside 2xx becomes a `CmsError` carrying the API's
 * `{detail, code, errors?}` body and the HTTP `status` (decisions.md, Errors); a batch that fails
 * becomes a `BatchError` that also says which request failed. A request that got no answer at all
 * (connection refused or dropped, DNS, an abort) is a `CmsNetworkError`, never a `CmsError`.
 */
import type { BatchFailed, ErrorBody } from "./types.js";

/** An error answer of the API: `status` (HTTP), `code` (stable snake_case), `detail` (for people),
 * `errors` (422: field name -> messages, dotted keys for nested input), and the whole `body`. */
export class CmsError extends Error {
  /** The HTTP status, e.g. 404, 422. */
  readonly status: number;
  /** The API's error code, e.g. `not_found`, `validation_error`; `http_error` when the body was not the API's. */
  readonly code: string;
  /** The API's human-readable message. */
  readonly detail: string;
  /** Field name -> messages (422), else an empty object. */
  readonly errors: Record<string, string[]>;
  /** The parsed answer body as sent (or `null` when it was not JSON). */
  readonly body: unknown;
  /** Always false: an answer came (see `CmsNetworkError.isAbort`). */
  readonly isAbort: boolean = false;

  /** `status` and the parsed `body` of an error answer; a body that is not the API's error shape
   * gives `code` `http_error` and a `detail` naming the status. */
  constructor(status: number, body: unknown) {
    const parsed = asErrorBody(body);
    const detail = parsed?.detail ?? `HTTP ${status}`;
    super(`${status} ${parsed?.code ?? "http_error"}: ${detail}`);
    this.name = "CmsError";
    this.status = status;
    this.code = parsed?.code ?? "http_error";
    this.detail = detail;
    this.errors = normalizeErrors(parsed?.errors);
    this.body = body;
  }
}

/** A batch that changed nothing because one request failed: `failed` is `{index (from 0), status, body}`,
 * the answer that request would have got alone; absent when the whole batch was refused (e.g. too many
 * requests, or a database without transactions). */
export class BatchError extends CmsError {
  /** The first failing request and its own answer, when one request failed. */
  readonly failed: BatchFailed | undefined;

  /** `status` and the parsed batch failure body (`{detail, code, failed?}`). */
  constructor(status: number, body: unknown) {
    super(status, body);
    this.name = "BatchError";
    const failed = (body as { failed?: unknown } | null)?.failed;
    this.failed = isObject(failed) ? (failed as BatchFailed) : undefined;
  }
}

/** No answer: the request could not be sent or its answer could not be read (`cause` holds the
 * platform's error). Distinct from `CmsError`, which is an answer. */
export class CmsNetworkError extends Error {
  /** The URL the request went to. */
  readonly url: string;
  /** True when the request was aborted: by its `signal`, or cancelled by a later call with the same
   * `requestKey` (`cancelRequest`, `cancelAllRequests`, auto-cancellation). */
  readonly isAbort: boolean;

  /** The `url` that failed and the platform's `cause`; `aborted`: the request's signal was aborted
   * (else `isAbort` is whether `cause` is an `AbortError`). */
  constructor(url: string, cause: unknown, aborted = false) {
    super(`request to ${url} failed: ${cause instanceof Error ? cause.message : String(cause)}`, { cause });
    this.name = "CmsNetworkError";
    this.url = url;
    this.isAbort = aborted || (cause as { name?: unknown } | null)?.name === "AbortError";
  }
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function asErrorBody(body: unknown): ErrorBody | null {
  if (!isObject(body) || typeof body["code"] !== "string" || typeof body["detail"] !== "string") {
    return null;
  }
  return body as ErrorBody;
}

function normalizeErrors(errors: unknown): Record<string, string[]> {
  const out: Record<string, string[]> = {};
  if (!isObject(errors)) {
    return out;
  }
  for (const [field, messages] of Object.entries(errors)) {
    out[field] = Array.isArray(messages) ? messages.map(String) : [String(messages)];
  }
  return out;
}
