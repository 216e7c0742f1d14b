/**
 * A parser of `text/event-stream` (the WHATWG HTML "server-sent events" format), so that realtime
 * runs over `fetch` where the platform has no `EventSource` (Node 20) and can send headers
 * (`Last-Event-ID` on a resume) where `EventSource` cannot choose them.
 */

/** The longest line the parser holds (characters); a longer one is an error (the stream is dropped). */
export const MAX_LINE_CHARS = 16 * 1024 * 1024;

/** One dispatched event: its `event` name (`message` when unnamed), its `data` (lines joined by
 * `\n`) and the `id` of its `id:` field (`null` when it had none). */
export interface SseEvent {
  event: string;
  data: string;
  id: string | null;
}

/** Feeds on decoded text chunks (`push`) and calls `onEvent` for each complete event. */
export class SseParser {
  private readonly onEvent: (event: SseEvent) => void;
  private buffer = "";
  private data: string[] = [];
  private eventName = "";
  private eventId: string | null = null;

  /** A parser that calls `onEvent` for each event. */
  constructor(onEvent: (event: SseEvent) => void) {
    this.onEvent = onEvent;
  }

  /** Take the next chunk of text; lines may end in `\r\n`, `\n` or `\r` and may span chunks.
   * Throws `RangeError` when a line passes `MAX_LINE_CHARS`. */
  push(chunk: string): void {
    this.buffer += chunk;
    let start = 0;
    for (;;) {
      const match = /\r\n|\r|\n/g;
      match.lastIndex = start;
      const found = match.exec(this.buffer);
      // a lone "\r" at the very end may be the first half of "\r\n": wait for the next chunk
      if (!found || (found[0] === "\r" && found.index === this.buffer.length - 1)) {
        break;
      }
      this.line(this.buffer.slice(start, found.index));
      start = found.index + found[0].length;
    }
    this.buffer = this.buffer.slice(start);
    if (this.buffer.length > MAX_LINE_CHARS) {
      throw new RangeError(`server-sent event line longer than ${MAX_LINE_CHARS} characters`);
    }
  }

  private line(text: string): void {
    if (text === "") {
      this.dispatch();
      return;
    }
    if (text.startsWith(":")) {
      return;  // a comment, e.g. the server's `: ping`
    }
    const colon = text.indexOf(":");
    const field = colon === -1 ? text : text.slice(0, colon);
    let value = colon === -1 ? "" : text.slice(colon + 1);
    if (value.startsWith(" ")) {
      value = value.slice(1);
    }
    if (field === "data") {
      this.data.push(value);
    } else if (field === "event") {
      this.eventName = value;
    } else if (field === "id" && !value.includes("\0")) {
      this.eventId = value;
    }
  }

  private dispatch(): void {
    const event: SseEvent = { event: this.eventName || "message", data: this.data.join("\n"), id: this.eventId };
    const hasData = this.data.length > 0;
    this.data = [];
    this.eventName = "";
    this.eventId = null;
    if (hasData) {
      this.onEvent(event);
    }
  }
}
