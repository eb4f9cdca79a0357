// The `text/event-stream` parser and the rules of the two streams across connections. No I/O.
import type { components } from "./schema.js";

/** An event as the desk sends it: `kind` tells what `data` holds. */
export type TicketEvent = components["schemas"]["TicketEvent"];
/** A stream's event; `cursor` is the firehose's resume point (null on ticket streams and live events). */
export type Event = TicketEvent & { cursor: string | null };

/** A ticket's final events: its stream ends after the last of them. */
export const FINAL_KINDS: ReadonlySet<string> = new Set(["ticket.done", "ticket.failed", "ticket.cancelled"]);
const REOPENING_KINDS: ReadonlySet<string> = new Set([
  "ticket.created",
  "ticket.started",
  "ticket.requeued",
  "ticket.waiting",
]);

export interface SseMessage {
  /** null for a comment (`: ping`). */
  data: string | null;
  id: string | null;
  event: string;
}

/** Incremental parser: feed text, get complete messages; a message cut short is never returned. */
export class SseParser {
  private buf = "";
  private data: string[] = [];
  private id: string | null = null;
  private event = "";
  private decoder = new TextDecoder();
  retryMs: number | null = null;

  *feed(chunk: Uint8Array | string): Generator<SseMessage> {
    this.buf += typeof chunk === "string" ? chunk : this.decoder.decode(chunk, { stream: true });
    for (;;) {
      const lf = this.buf.indexOf("\n");
      const cr = this.buf.indexOf("\r");
      let end: number;
      let next: number;
      if (cr === -1 || (lf !== -1 && lf < cr)) {
        if (lf === -1) return;
        end = lf;
        next = lf + 1;
      } else {
        // A CR at the very end waits for the next chunk, which may start with its LF.
        if (cr + 1 === this.buf.length) return;
        end = cr;
        next = this.buf[cr + 1] === "\n" ? cr + 2 : cr + 1;
      }
      const line = this.buf.slice(0, end);
      this.buf = this.buf.slice(next);
      const message = this.line(line);
      if (message) yield message;
    }
  }

  private line(line: string): SseMessage | null {
    if (line === "") {
      if (this.data.length === 0) {
        // An `id:` alone (the firehose's starting position): a position to resume from, no event.
        const id = this.id;
        this.id = null;
        this.event = "";
        return id === null ? null : { data: null, id, event: "" };
      }
      const message = { data: this.data.join("\n"), id: this.id, event: this.event || "message" };
      this.data = [];
      this.id = null;
      this.event = "";
      return message;
    }
    if (line.startsWith(":")) return { data: null, id: null, event: "" };
    const colon = line.indexOf(":");
    const name = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? "" : line.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (name === "data") this.data.push(value);
    else if (name === "id" && !value.includes("\0")) this.id = value;
    else if (name === "event") this.event = value;
    else if (name === "retry" && /^[0-9]+$/.test(value)) this.retryMs = Number(value);
    return null;
  }
}

function parseEvent(message: SseMessage, cursor: string | null): Event | null {
  if (message.data === null) return null;
  let value: unknown;
  try {
    value = JSON.parse(message.data);
  } catch {
    return null;
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) return null;
  return { ...(value as TicketEvent), cursor };
}

export interface StreamState {
  headers(): Record<string, string>;
  accept(message: SseMessage): Event | null;
  /** Whether an end of the connection (clean or not) is the end of the stream. */
  ended(clean: boolean): boolean;
}

/** A ticket stream across connections: each persisted event once, in seq order. */
export class TicketStreamState implements StreamState {
  last: number;
  /**
   * Whether the latest status event seen is final. The desk ends the stream once it has sent all
   * the finished ticket logged (a cancel may be followed by the text it kept), so a clean end in
   * this state is the end, and any other end is a cut.
   */
  finished = false;

  constructor(after?: number | null) {
    this.last = after ?? 0;
  }

  headers(): Record<string, string> {
    return this.last > 0 ? { "Last-Event-ID": String(this.last) } : {};
  }

  accept(message: SseMessage): Event | null {
    const event = parseEvent(message, null);
    if (event === null) return null;
    const seq = event.seq;
    if (seq === null || seq === undefined) return event; // live-only: passed through, never replayed
    if (seq <= this.last) return null;
    this.last = seq;
    if (FINAL_KINDS.has(event.kind)) this.finished = true;
    else if (REOPENING_KINDS.has(event.kind)) this.finished = false;
    return event;
  }

  ended(clean: boolean): boolean {
    return clean && this.finished;
  }
}

/** The firehose across connections: resumes after the last cursor it delivered. */
export class FirehoseState implements StreamState {
  constructor(public cursor: string | null = null) {}

  headers(): Record<string, string> {
    return this.cursor ? { "Last-Event-ID": this.cursor } : {};
  }

  accept(message: SseMessage): Event | null {
    // A stream opened without a cursor starts with its position, so a cut before the first event
    // loses nothing either.
    if (message.data === null && message.id) {
      this.cursor = message.id;
      return null;
    }
    const event = parseEvent(message, message.id);
    if (event !== null && message.id) this.cursor = message.id;
    return event;
  }

  ended(): boolean {
    return false;
  }
}
