// A stand-in desk for the unit tests: real HTTP on a real port, scripted answers, and event
// streams that it can cut after any number of bytes, abruptly (the socket closes mid-body) or
// cleanly (the chunked body ends properly).
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

export type Cut = ["abrupt" | "clean", number];
type Payload = unknown | ((req: IncomingMessage) => unknown);
interface Answer {
  status: number;
  headers: Record<string, string>;
  payload: Payload;
}

export interface Ev {
  ticket_id: string;
  ticket_key: string;
  seq: number | null;
  kind: string;
  agent: string;
  at: string;
  data: Record<string, unknown>;
}

export function event(seq: number | null, kind: string, data: Record<string, unknown> = {}, key = "TICKET-1"): Ev {
  return { ticket_id: "0193aaaa-0000-7000-8000-000000000001", ticket_key: key, seq, kind, agent: "default", at: "2026-01-01T00:00:00Z", data };
}

export function frame(ev: Ev, id: string | null): string {
  return (id === null ? "" : `id: ${id}\n`) + `data: ${JSON.stringify(ev)}\n\n`;
}

export function ticketJson(key = "TICKET-1", status = "todo"): Record<string, unknown> {
  return {
    id: "0193aaaa-0000-7000-8000-000000000001", key, task: "t", labels: [], status, reporter: "user",
    priority: 0, attempts: 0, max_attempts: 3, metadata: {},
    usage: { input_tokens: 0, output_tokens: 0, cache_read_tokens: 0, cache_creation_tokens: 0, requests: 0, tool_calls: 0, cost_usd: 0, unpriced: false },
    budget_usd: null,
    waiting_for: null,
    agent_version: null,
    created_at: "2026-01-01T00:00:00Z", updated_at: "2026-01-01T00:00:00Z", pending_approvals: [], pending_question: null,
  };
}

export interface Recorded {
  method: string;
  url: string;
  headers: IncomingMessage["headers"];
  body: string;
}

export class Double {
  ticketEvents: Ev[] = [];
  firehose: [string, Ev][] = [];
  cuts: Cut[] = [];
  /** Events before Last-Event-ID that a resumed ticket stream sends again: the client must drop them. */
  overlap = 0;
  streamConnections = 0;
  requests: Recorded[] = [];
  private answers = new Map<string, Answer[]>();
  private server: Server;
  url = "";

  constructor() {
    this.server = createServer((req, res) => {
      let body = "";
      req.on("data", (c: Buffer) => (body += c.toString()));
      req.on("end", () => this.handle(req, res, body));
    });
  }

  async start(): Promise<this> {
    await new Promise<void>((resolve) => this.server.listen(0, "127.0.0.1", resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  close(): Promise<void> {
    this.server.closeAllConnections();
    return new Promise((resolve) => this.server.close(() => resolve()));
  }

  /** Queues an answer; the last one queued for a route repeats. */
  answer(method: string, path: string, status: number, payload: Payload, headers: Record<string, string> = {}): void {
    const key = `${method} ${path}`;
    this.answers.set(key, [...(this.answers.get(key) ?? []), { status, headers, payload }]);
  }

  private take(method: string, path: string): Answer | undefined {
    const queue = this.answers.get(`${method} ${path}`);
    if (!queue || queue.length === 0) return undefined;
    return queue.length > 1 ? queue.shift() : queue[0];
  }

  /** What the desk would send after seq `after` (deltas only on the first connection: they are live). */
  ticketBody(after: number, first: boolean): [string, boolean] {
    let out = "retry: 10\n\n";
    for (const ev of this.ticketEvents) {
      if (ev.seq === null) {
        if (first) out += frame(ev, null);
      } else if (ev.seq > after) out += frame(ev, String(ev.seq));
    }
    const finished = this.ticketEvents.some((e) => ["ticket.done", "ticket.failed", "ticket.cancelled"].includes(e.kind));
    return [out, finished];
  }

  private handle(req: IncomingMessage, res: ServerResponse, body: string): void {
    const path = (req.url ?? "").split("?")[0]!;
    this.requests.push({ method: req.method ?? "", url: req.url ?? "", headers: req.headers, body });
    const answer = this.take(req.method ?? "", path);
    if (path.endsWith("/events") && (!answer || answer.status === 200)) return this.stream(req, res, path);
    const a = answer ?? { status: 404, headers: {}, payload: { error: { code: "not_found", message: `no ${path}` } } };
    const payload = typeof a.payload === "function" ? (a.payload as (r: IncomingMessage) => unknown)(req) : a.payload;
    const data = typeof payload === "string" ? payload : JSON.stringify(payload);
    res.writeHead(a.status, { ...a.headers, "content-type": "application/json", "content-length": Buffer.byteLength(data) });
    res.end(data);
  }

  private stream(req: IncomingMessage, res: ServerResponse, path: string): void {
    const n = this.streamConnections++;
    const cut = this.cuts[n];
    const last = req.headers["last-event-id"] as string | undefined;
    let body: string;
    let ends = false;
    if (path === "/v1/events") {
      body = "retry: 10\n\n";
      let seen = last === undefined;
      for (const [cursor, ev] of this.firehose) {
        if (seen) body += frame(ev, cursor);
        seen ||= cursor === last;
      }
    } else {
      [body, ends] = this.ticketBody(Math.max(0, Number(last ?? 0) - this.overlap), n === 0);
    }
    res.writeHead(200, { "content-type": "text/event-stream" });
    const bytes = Buffer.from(body);
    if (cut) {
      const [mode, size] = cut;
      if (size > 0) res.write(bytes.subarray(0, size));
      if (mode === "clean") res.end();
      else res.write("", () => res.socket?.destroy());
      return;
    }
    res.write(bytes);
    if (ends) res.end();
    // Otherwise held open until the client goes away.
  }
}
