/**
 * Realtime subscriptions (decisions.md, Realtime): one server-sent-events stream per client
 * (`GET /api/v1/realtime`, read over `fetch` and parsed by `eventsource-parser`), whose `connect` event names the
 * `client_id`, and `POST /api/v1/realtime {client_id, subscriptions}` with the client's credentials
 * to set what it receives. The stream is kept up: after a drop it reconnects with exponential backoff
 * and resumes with `?client_id=` and `Last-Event-ID`, so the server replays what was missed (ids
 * already delivered are skipped); it re-posts the subscriptions when it comes back as a new client or
 * when the credentials changed (a token refresh, a sign-in, an API key), because the server checks
 * each event against the credentials of the last POST and stops at their expiry. A `resync` event
 * (the missed events are gone) goes to the `onResync` listeners: reload your data.
 *
 * The server binds a client id to the principal of its first POST with credentials and refuses (403
 * `forbidden`) a POST of anyone else, anonymous included. So when a re-post after a sign-in as another
 * user, or a sign-out, is refused, the client drops that id and its stream, opens a new stream (a new
 * client id) at once, posts the same subscriptions there with the new credentials and, once they are in
 * force, calls the `onResync` listeners: what the application shows was the old principal's view. The
 * callbacks stay subscribed; no 403 reaches the application.
 */
import type { CmsClient } from "./client.js";
import { unrefTimer } from "./client.js";
import { CmsError, CmsNetworkError } from "./errors.js";
import { createParser, type EventSourceMessage } from "eventsource-parser";
import type { BaseRecord, RecordModel } from "./types.js";

/** First reconnect delay; doubled per failed attempt up to `MAX_BACKOFF_MS`, with jitter. */
export const BASE_BACKOFF_MS = 200;
/** Longest reconnect delay. */
export const MAX_BACKOFF_MS = 5_000;
/** A stream silent this long is taken as dead and reopened (the server pings every 20 s). */
export const IDLE_TIMEOUT_MS = 45_000;
/** How long `subscribe` waits for the stream's `connect` event before it rejects. */
export const CONNECT_TIMEOUT_MS = 15_000;
/** How many delivered events (id and topic) are remembered to skip a replayed duplicate. */
export const SEEN_IDS = 1_000;
/** The most characters the stream parser holds for one unfinished line or event; past it the stream
 * is dropped (and reopened), so a hostile or broken server cannot fill memory. */
export const MAX_EVENT_CHARS = 16 * 1024 * 1024;

/** One record event, the same shape in both clients (decisions.md, Clients): the `topic` as subscribed
 * (with its `?filter=...`), the event's `id`, the `action`, and the `record` (as it was, for a delete). */
export interface RealtimeEvent<T extends BaseRecord = RecordModel> {
  topic: string;
  id: string;
  action: "create" | "update" | "delete";
  record: T;
}

/** What `subscribe` takes besides the topic: `filter` (only matching records), `expand`, `fields`, and
 * `locale` (localized fields in that locale; without it they are objects of locale to value). */
export interface SubscribeOptions {
  filter?: string;
  expand?: string;
  fields?: string;
  locale?: string;
}

/** Called for each event of a subscription. */
export type RealtimeCallback<T extends BaseRecord = RecordModel> = (event: RealtimeEvent<T>) => void;

/** Stops a subscription; resolves once the server's set no longer holds it. */
export type Unsubscribe = () => Promise<void>;

/** The topic as sent and as the server names its events: `posts/*?filter=...&expand=...&fields=...`
 * (values percent-encoded, as the server decodes them). */
export function topicString(topic: string, options: SubscribeOptions = {}): string {
  const parts: string[] = [];
  for (const name of ["filter", "expand", "fields", "locale"] as const) {
    const value = options[name];
    if (value) {
      parts.push(`${name}=${encodeURIComponent(value)}`);
    }
  }
  return parts.length ? `${topic}${topic.includes("?") ? "&" : "?"}${parts.join("&")}` : topic;
}

/** The realtime side of one client; see the module comment. */
export class RealtimeService {
  private readonly client: CmsClient;
  private readonly subscriptions = new Map<string, Set<RealtimeCallback>>();
  private readonly resyncListeners = new Set<() => void>();
  private readonly seen = new Set<string>();
  private running = false;
  private controller: AbortController | null = null;
  private wakeUp: (() => void) | null = null;
  private connected = false;
  private clientIdValue = "";
  private lastEventId = "";
  private posted: { clientId: string; key: string } | null = null;
  /** The client id was dropped for another principal's: tell `onResync` once the new set is in force. */
  private principalChanged = false;
  /** Reopen the stream without the backoff delay (after dropping the client id). */
  private reconnectNow = false;
  private postChain: Promise<void> = Promise.resolve();
  private readonly waiters = new Set<{ resolve: () => void; reject: (error: Error) => void }>();

  /** The realtime side of `client`; re-posts when its auth store changes. */
  constructor(client: CmsClient) {
    this.client = client;
    client.authStore.onChange(() => this.credentialsChanged());
  }

  /** The stream's `client_id` (`""` before the first `connect`). */
  get clientId(): string {
    return this.clientIdValue;
  }

  /** Whether the stream is open now. */
  get isConnected(): boolean {
    return this.connected;
  }

  /** Receive the events of `topic` (`<collection>/*` or `<collection>/<record id>`) that match
   * `options.filter`, shaped by `expand`/`fields`. Resolves, once the server has the subscription in
   * force, to the function that ends it. Rejects with `CmsError` (422 for an unknown collection or a
   * bad filter) or `CmsNetworkError` (no stream within `CONNECT_TIMEOUT_MS`). */
  async subscribe<T extends BaseRecord = RecordModel>(topic: string, callback: RealtimeCallback<T>,
    options: SubscribeOptions = {}): Promise<Unsubscribe> {
    const key = topicString(topic, options);
    const entry = callback as RealtimeCallback;
    let callbacks = this.subscriptions.get(key);
    if (!callbacks) {
      callbacks = new Set();
      this.subscriptions.set(key, callbacks);
    }
    callbacks.add(entry);
    const remove = (): boolean => {
      callbacks.delete(entry);
      if (callbacks.size === 0 && this.subscriptions.get(key) === callbacks) {
        this.subscriptions.delete(key);
      }
      return this.subscriptions.size === 0;
    };
    try {
      this.start();
      await this.waitConnected();
      await this.sync();
    } catch (error) {
      if (remove()) {
        this.stop();
      }
      throw error;
    }
    let active = true;
    return async () => {
      if (!active) {
        return;
      }
      active = false;
      if (remove()) {
        this.stop();
      } else {
        await this.sync();
      }
    };
  }

  /** Stop every subscription of `topic`: the topic as given to `subscribe` (`posts/*`, whatever its
   * options) or as an event names it (`posts/*?filter=...`, that one only); without `topic`, every
   * subscription (the stream is closed). Resolves once the server's set no longer holds them. Rejects like
   * `subscribe` when the server refuses the new set. */
  async unsubscribe(topic?: string): Promise<void> {
    for (const key of [...this.subscriptions.keys()]) {
      if (topic === undefined || key === topic || key.startsWith(`${topic}?`)) {
        this.subscriptions.delete(key);
      }
    }
    if (this.subscriptions.size === 0) {
      this.stop();
    } else {
      await this.sync();
    }
  }

  /** Call `listener` when the server answers a resume with `resync` (events were missed for good:
   * reload the data you show), and when the subscriptions moved to a new stream because the
   * credentials are now another principal's (a sign-in as another user, a sign-out): the events from
   * then on follow the new principal's rules. Returns the function that stops it. */
  onResync(listener: () => void): () => void {
    this.resyncListeners.add(listener);
    return () => {
      this.resyncListeners.delete(listener);
    };
  }

  /** Re-post the subscriptions with the client's current credentials (called on each auth store
   * change and API key change); a no-op while there is no stream. */
  credentialsChanged(): void {
    if (this.clientIdValue && this.subscriptions.size) {
      this.sync().catch(() => undefined);  // a failed re-post is retried at the next reconnect
    }
  }

  /** Drop every subscription and close the stream. */
  close(): void {
    this.subscriptions.clear();
    this.stop();
  }

  private start(): void {
    if (!this.running) {
      this.running = true;
      void this.run();
    }
  }

  private stop(): void {
    this.running = false;
    this.controller?.abort();
    this.wakeUp?.();
    this.setConnected(false);
    this.clientIdValue = "";
    this.lastEventId = "";
    this.posted = null;
    this.principalChanged = false;
    this.reconnectNow = false;
    this.seen.clear();
    for (const waiter of [...this.waiters]) {
      waiter.reject(new CmsNetworkError(this.client.buildUrl("/api/v1/realtime"), new Error("realtime closed")));
    }
  }

  /** Keep a stream open while running: read it until it ends or fails, then wait and reopen. */
  private async run(): Promise<void> {
    let attempt = 0;
    while (this.running) {
      const controller = new AbortController();
      this.controller = controller;
      try {
        await this.read(controller, () => {
          attempt = 0;
        });
      } catch {
        // dropped, refused or unreadable: reconnect below
      }
      if (this.controller === controller) {
        this.controller = null;
        this.setConnected(false);
      }
      if (!this.running) {
        return;
      }
      if (this.reconnectNow) {
        this.reconnectNow = false;
        continue;
      }
      const delayMs = Math.min(MAX_BACKOFF_MS, BASE_BACKOFF_MS * 2 ** attempt) * (0.75 + Math.random() / 2);
      attempt += 1;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, delayMs);
        this.wakeUp = () => {
          clearTimeout(timer);
          resolve();
        };
      });
      this.wakeUp = null;
      this.reconnectNow = false;
    }
  }

  /** Open one stream (a resume when there is a client id) and dispatch its events until it ends. */
  private async read(controller: AbortController, opened: () => void): Promise<void> {
    const headers: Record<string, string> = { Accept: "text/event-stream", "Cache-Control": "no-cache" };
    if (this.clientIdValue && this.lastEventId) {
      headers["Last-Event-ID"] = this.lastEventId;
    }
    const query = this.clientIdValue ? { client_id: this.clientIdValue } : {};
    const response = await this.client.openStream("/api/v1/realtime", query, headers, controller.signal);
    if (!response.ok || !response.body) {
      const text = await response.text().catch(() => "");
      let body: unknown = null;
      try {
        body = JSON.parse(text);
      } catch {
        // not the API's error body
      }
      throw new CmsError(response.status, body);
    }
    let idle = unrefTimer(setTimeout(() => controller.abort(), IDLE_TIMEOUT_MS));
    let overflow = false;
    const parser = createParser({
      maxBufferSize: MAX_EVENT_CHARS,
      onEvent: (event) => {
        if (controller.signal.aborted) {
          return;  // the rest of a chunk of a stream given up (its client id dropped)
        }
        if (event.event === "connect") {
          opened();
        }
        this.dispatch(event);
      },
      onError: (error) => {
        overflow ||= error.type === "max-buffer-size-exceeded";  // unknown fields are ignored, as the format says
      },
    });
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) {
          return;
        }
        clearTimeout(idle);
        idle = unrefTimer(setTimeout(() => controller.abort(), IDLE_TIMEOUT_MS));
        parser.feed(value);
        if (overflow) {
          throw new RangeError(`a server-sent event passed ${MAX_EVENT_CHARS} characters`);
        }
      }
    } finally {
      clearTimeout(idle);
      controller.abort();
    }
  }

  private dispatch(event: EventSourceMessage): void {
    if (event.id !== undefined) {
      const seenKey = `${event.id}\n${event.event ?? ""}`;  // a write matching several topics is one id, once per topic
      if (this.seen.has(seenKey)) {
        return;  // a replay of an event already delivered
      }
      this.seen.add(seenKey);
      if (this.seen.size > SEEN_IDS) {
        this.seen.delete(this.seen.values().next().value as string);
      }
      this.lastEventId = event.id;
    }
    if (event.event === "connect") {
      const clientId = (JSON.parse(event.data) as { client_id?: unknown }).client_id;
      this.clientIdValue = typeof clientId === "string" ? clientId : "";
      this.setConnected(true);
      if (this.subscriptions.size) {
        this.sync().catch(() => undefined);  // a new client has no subscriptions yet; a resume may need new credentials
      }
      return;
    }
    if (event.event === "resync") {
      for (const listener of [...this.resyncListeners]) {
        listener();
      }
      return;
    }
    const topic = event.event ?? "";
    const callbacks = this.subscriptions.get(topic);
    if (!callbacks) {
      return;
    }
    const payload = JSON.parse(event.data) as Pick<RealtimeEvent, "action" | "record">;
    for (const callback of [...callbacks]) {
      callback({ topic, id: event.id ?? "", action: payload.action, record: payload.record });
    }
  }

  /** Post the subscriptions when the server's set (client id, topics, credentials) differs from ours.
   * Posts run one after another, each sending the set as it is then. */
  private sync(): Promise<void> {
    const run = this.postChain.then(() => this.postIfChanged());
    this.postChain = run.catch(() => undefined);
    return run;
  }

  private async postIfChanged(): Promise<void> {
    for (let moved = false; ; moved = true) {
      const clientId = this.clientIdValue;
      if (!clientId) {
        return;  // not connected: the next `connect` syncs
      }
      const subscriptions = [...this.subscriptions.keys()];
      const wanted = (): string => JSON.stringify([subscriptions, this.client.credentialHeaders()]);
      if (this.posted?.clientId === clientId && this.posted.key === wanted()) {
        return;
      }
      try {
        await this.client.send<void>("/api/v1/realtime", { method: "POST", body: { client_id: clientId, subscriptions } });
      } catch (error) {
        if (error instanceof CmsError && error.status === 404) {
          return;  // the stream dropped meanwhile; its reconnect posts again
        }
        if (error instanceof CmsError && error.status === 403 && error.code === "forbidden" && !moved
          && this.clientIdValue === clientId) {
          // the client id is bound to another principal: post again on a new stream
          this.dropClient();
          await this.waitConnected();
          continue;
        }
        throw error;
      }
      this.posted = { clientId, key: wanted() };
      if (this.principalChanged && this.clientIdValue === clientId) {
        this.principalChanged = false;
        for (const listener of [...this.resyncListeners]) {
          listener();
        }
      }
      return;
    }
  }

  /** Give up the client id (bound to another principal) and its stream; `run` opens a new one at once. */
  private dropClient(): void {
    this.clientIdValue = "";
    this.lastEventId = "";
    this.posted = null;
    this.seen.clear();
    this.principalChanged = true;
    this.reconnectNow = true;
    this.setConnected(false);
    this.controller?.abort();
    this.wakeUp?.();
  }

  private waitConnected(): Promise<void> {
    if (this.connected) {
      return Promise.resolve();
    }
    return new Promise<void>((resolve, reject) => {
      const waiter = {
        resolve: () => {
          clearTimeout(timer);
          this.waiters.delete(waiter);
          resolve();
        },
        reject: (error: Error) => {
          clearTimeout(timer);
          this.waiters.delete(waiter);
          reject(error);
        },
      };
      const timer = setTimeout(() => waiter.reject(new CmsNetworkError(this.client.buildUrl("/api/v1/realtime"),
        new Error(`no realtime connection within ${CONNECT_TIMEOUT_MS} ms`))), CONNECT_TIMEOUT_MS);
      this.waiters.add(waiter);
    });
  }

  private setConnected(connected: boolean): void {
    this.connected = connected;
    if (connected) {
      for (const waiter of [...this.waiters]) {
        waiter.resolve();
      }
    }
  }
}
