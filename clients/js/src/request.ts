/**
 * What every call of the client takes besides its own arguments (`RequestOptions`): an abort `signal`
 * and an auto-cancellation `requestKey` (see `CmsClient.autoCancellation`).
 */

/** What every call takes besides its own arguments: an abort `signal` and an auto-cancellation key. */
export interface RequestOptions {
  /** Aborts the request: the call then rejects with a `CmsNetworkError` whose `isAbort` is true. */
  signal?: AbortSignal;
  /** Auto-cancellation: a later call with the same key aborts this one if it is still pending (it
   * rejects with `isAbort` true). `null` opts out of `autoCancellation(true)` for this call. */
  requestKey?: string | null;
}

/** `{signal, requestKey}` of `options` as far as it carries them (the request options take no `undefined`). */
export function requestOf(options: RequestOptions): RequestOptions {
  const out: RequestOptions = {};
  if (options.signal) {
    out.signal = options.signal;
  }
  if (options.requestKey !== undefined) {
    out.requestKey = options.requestKey;
  }
  return out;
}
