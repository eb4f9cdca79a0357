// The official TypeScript client of agentdesk, on the platform's fetch (Node 18+, browsers).
import type { components } from "./schema.js";
import { FirehoseState, SseParser, TicketStreamState, type Event, type StreamState } from "./sse.js";

export type { components, paths } from "./schema.js";
export { FINAL_KINDS, SseParser, type Event, type TicketEvent } from "./sse.js";

export type Ticket = components["schemas"]["Ticket"];
export type Comment = components["schemas"]["Comment"];
export type CreateTicket = components["schemas"]["CreateTicket"];
export type Status = components["schemas"]["Status"];
export type Experiment = components["schemas"]["Experiment"];
export type CreateExperiment = components["schemas"]["CreateExperiment"];
export type ReplayTicket = components["schemas"]["ReplayTicket"];

/** Every error the client throws. */
export class AgentDeskError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "AgentDeskError";
  }
}

/** The API answered with an error: HTTP `status`, the API's snake_case `code`, and `message`. */
export class ApiError extends AgentDeskError {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly retryAfterMs: number | null = null,
  ) {
    super(message);
    this.name = "ApiError";
  }

  static async fromResponse(resp: Response): Promise<ApiError> {
    const text = await resp.text().catch(() => "");
    let code = `http_${resp.status}`;
    let message = text.slice(0, 500).trim() || `HTTP ${resp.status}`;
    try {
      const error = (JSON.parse(text) as { error?: { code?: unknown; message?: unknown } }).error;
      if (error && typeof error.code === "string" && typeof error.message === "string") {
        code = error.code;
        message = error.message;
      }
    } catch {
      // not the API's error body: keep the text
    }
    return new ApiError(resp.status, code, message, retryAfterMs(resp.headers.get("retry-after")));
  }
}

/** A stream gave up after too many consecutive failed connections; `cause` is the last one. */
export class StreamError extends AgentDeskError {
  constructor(
    message: string,
    readonly cause: unknown,
    readonly attempts: number,
  ) {
    super(`${message} after ${attempts} attempts: ${String(cause)}`, { cause });
    this.name = "StreamError";
  }
}

export interface AgentDeskOptions {
  baseUrl?: string;
  token?: string | null;
  /** Sent as the `AgentDesk-Project` header. */
  project?: string | null;
  fetch?: typeof fetch;
  /** Retries of a request answered 429 or 503 (or not answered, when repeating it is safe). */
  maxRetries?: number;
  /** A Retry-After longer than this is not waited out: the error is thrown at once. */
  maxRetryWaitMs?: number;
  /** Consecutive failed connections after which a stream throws StreamError. */
  streamMaxFailures?: number;
  backoffBaseMs?: number;
  backoffCapMs?: number;
  /** A stream silent this long (the desk pings every 15 s) is reconnected. */
  streamIdleMs?: number;
}

export interface ListTicketsOptions {
  status?: string | string[];
  label?: string | string[];
  agent?: string | string[];
  parent?: string;
  q?: string;
  order?: "asc" | "desc";
  limit?: number;
}

type Query = Record<string, string | number | string[] | undefined | null>;

interface RequestOptions {
  query?: Query;
  body?: unknown;
  headers?: Record<string, string>;
  /** Whether a request that got no answer may be sent again (GETs and keyed creates). */
  safeToRepeat?: boolean;
}

function retryAfterMs(value: string | null): number | null {
  if (!value) return null;
  const v = value.trim();
  if (/^[0-9]+$/.test(v)) return Number(v) * 1000;
  const when = Date.parse(v);
  return Number.isNaN(when) ? null : Math.max(0, when - Date.now());
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function uuid(): string {
  const c = (globalThis as { crypto?: { randomUUID?: () => string } }).crypto;
  if (c?.randomUUID) return c.randomUUID();
  // Node 18 without the global crypto: uniqueness is all an idempotency key needs.
  return "xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx".replace(/[xy]/g, (ch) => {
    const r = (Math.random() * 16) | 0;
    return (ch === "x" ? r : (r & 0x3) | 0x8).toString(16);
  });
}

function ticketPath(ticket: string): string {
  return `/v1/tickets/${encodeURIComponent(ticket)}`;
}

function experimentPath(experiment: string): string {
  return `/v1/experiments/${encodeURIComponent(experiment)}`;
}

export class AgentDesk {
  readonly baseUrl: string;
  readonly tickets: Tickets;
  readonly events: Events;
  readonly experiments: Experiments;
  private readonly opts: Required<Omit<AgentDeskOptions, "baseUrl" | "token" | "project" | "fetch">>;
  private readonly fetchImpl: typeof fetch;

  constructor(private readonly options: AgentDeskOptions = {}) {
    const base = (options.baseUrl ?? "http://127.0.0.1:8080").replace(/\/+$/, "");
    this.baseUrl = base.endsWith("/v1") ? base.slice(0, -3) : base;
    this.fetchImpl = options.fetch ?? ((input, init) => fetch(input, init));
    this.opts = {
      maxRetries: options.maxRetries ?? 3,
      maxRetryWaitMs: options.maxRetryWaitMs ?? 60_000,
      streamMaxFailures: options.streamMaxFailures ?? 8,
      backoffBaseMs: options.backoffBaseMs ?? 500,
      backoffCapMs: options.backoffCapMs ?? 10_000,
      streamIdleMs: options.streamIdleMs ?? 60_000,
    };
    this.tickets = new Tickets(this);
    this.experiments = new Experiments(this);
    this.events = new Events(this);
  }

  private headers(extra?: Record<string, string>): Record<string, string> {
    const h: Record<string, string> = { accept: "application/json" };
    if (this.options.token) h["authorization"] = `Bearer ${this.options.token}`;
    if (this.options.project) h["agentdesk-project"] = this.options.project;
    return { ...h, ...extra };
  }

  private url(path: string, query?: Query): string {
    const params = new URLSearchParams();
    for (const [k, v] of Object.entries(query ?? {})) {
      if (v === undefined || v === null) continue;
      params.set(k, Array.isArray(v) ? v.join(",") : String(v));
    }
    const qs = params.toString();
    return this.baseUrl + path + (qs ? `?${qs}` : "");
  }

  private backoff(attempt: number): number {
    return Math.min(this.opts.backoffCapMs, this.opts.backoffBaseMs * 2 ** attempt);
  }

  /**
   * One API call (`path` from the root: `/v1/stats`), retried on 429 and 503 as the options say;
   * the decoded JSON answer, or ApiError.
   */
  async request<T = unknown>(method: string, path: string, options: RequestOptions = {}): Promise<T> {
    const repeat = options.safeToRepeat ?? method === "GET";
    const headers = this.headers(options.headers);
    if (options.body !== undefined) headers["content-type"] = "application/json";
    for (let attempt = 0; ; attempt++) {
      let delay: number | null;
      let resp: Response;
      try {
        resp = await this.fetchImpl(this.url(path, options.query), {
          method,
          headers,
          body: options.body === undefined ? undefined : JSON.stringify(options.body),
        });
      } catch (e) {
        if (!repeat || attempt >= this.opts.maxRetries) {
          throw new AgentDeskError(`${method} ${path}: ${String(e)}`, { cause: e });
        }
        await sleep(this.backoff(attempt));
        continue;
      }
      if (resp.ok) {
        const text = await resp.text();
        return (text ? JSON.parse(text) : null) as T;
      }
      const error = await ApiError.fromResponse(resp);
      delay = null;
      if ((error.status === 429 || error.status === 503) && attempt < this.opts.maxRetries) {
        delay = error.retryAfterMs ?? this.backoff(attempt);
        if (delay > this.opts.maxRetryWaitMs) delay = null;
      }
      if (delay === null) throw error;
      await sleep(delay);
    }
  }

  /** @internal Every item of a list, page after page. */
  async *pages<T>(path: string, query: Query): AsyncGenerator<T> {
    const q = { ...query };
    for (;;) {
      const page = await this.request<{ items: T[]; next_cursor?: string | null }>("GET", path, { query: q });
      yield* page.items;
      if (!page.next_cursor) return;
      q["cursor"] = page.next_cursor;
    }
  }

  /** @internal An SSE stream that reconnects with Last-Event-ID as `state` says. */
  async *sse(path: string, query: Query, state: StreamState): AsyncGenerator<Event> {
    let failures = 0;
    let delay = 0;
    for (;;) {
      if (delay > 0) await sleep(delay);
      let why: unknown = null;
      const abort = new AbortController();
      let idle: ReturnType<typeof setTimeout> | undefined;
      const watch = () => {
        clearTimeout(idle);
        idle = setTimeout(() => abort.abort(new AgentDeskError("the stream was silent too long")), this.opts.streamIdleMs);
      };
      try {
        watch();
        const resp = await this.fetchImpl(this.url(path, query), {
          headers: this.headers({ accept: "text/event-stream", ...state.headers() }),
          signal: abort.signal,
        });
        if (resp.status !== 200 || !resp.body) throw await ApiError.fromResponse(resp);
        const reader = resp.body.getReader();
        const parser = new SseParser();
        for (;;) {
          const { done, value } = await reader.read();
          if (done) break;
          watch();
          for (const message of parser.feed(value)) {
            failures = 0;
            const event = state.accept(message);
            if (event) yield event;
          }
        }
      } catch (e) {
        why = e;
      } finally {
        clearTimeout(idle);
        abort.abort();
      }
      if (why instanceof ApiError && why.status < 500 && why.status !== 429) throw why;
      if (state.ended(why === null)) return;
      why ??= new AgentDeskError(
        state instanceof TicketStreamState ? "the stream ended before the ticket's final event" : "the stream ended",
      );
      failures += 1;
      if (failures > this.opts.streamMaxFailures) throw new StreamError(`GET ${path}: gave up`, why, failures);
      delay = this.backoff(failures - 1) * (0.5 + Math.random() / 2);
      if (why instanceof ApiError && why.retryAfterMs !== null) delay = Math.max(delay, why.retryAfterMs);
    }
  }
}

export class Tickets {
  constructor(private readonly desk: AgentDesk) {}

  /**
   * Creates a ticket. The `Idempotency-Key` (generated when not given) makes retries safe: a
   * repeat returns the first ticket.
   */
  create(body: CreateTicket & Record<string, unknown>, options: { idempotencyKey?: string } = {}): Promise<Ticket> {
    return this.desk.request<Ticket>("POST", "/v1/tickets", {
      body,
      headers: { "idempotency-key": options.idempotencyKey ?? uuid() },
      safeToRepeat: true,
    });
  }

  get(ticket: string): Promise<Ticket> {
    return this.desk.request<Ticket>("GET", ticketPath(ticket));
  }

  /** Every matching ticket, page after page (`limit` is the page size). */
  list(options: ListTicketsOptions = {}): AsyncGenerator<Ticket> {
    return this.desk.pages<Ticket>("/v1/tickets", { ...options });
  }

  update(ticket: string, fields: components["schemas"]["PatchTicket"]): Promise<Ticket> {
    return this.desk.request<Ticket>("PATCH", ticketPath(ticket), { body: fields });
  }

  comment(ticket: string, text: string, author?: string): Promise<Comment> {
    return this.desk.request<Comment>("POST", `${ticketPath(ticket)}/comments`, {
      body: author === undefined ? { text } : { text, author },
    });
  }

  comments(ticket: string, options: { limit?: number } = {}): AsyncGenerator<Comment> {
    return this.desk.pages<Comment>(`${ticketPath(ticket)}/comments`, { ...options });
  }

  cancel(ticket: string): Promise<Ticket> {
    return this.desk.request<Ticket>("POST", `${ticketPath(ticket)}/cancel`);
  }

  retry(ticket: string): Promise<Ticket> {
    return this.desk.request<Ticket>("POST", `${ticketPath(ticket)}/retry`);
  }

  /** Approves a call that waits for approval, or (without `callId`) every pending one. */
  approve(ticket: string, options: { callId?: string; reason?: string } = {}): Promise<Ticket> {
    return this.decide(ticket, true, options);
  }

  /** Denies a call (the model gets `reason`), or (without `callId`) every pending one. */
  deny(ticket: string, options: { callId?: string; reason?: string } = {}): Promise<Ticket> {
    return this.decide(ticket, false, options);
  }

  private decide(ticket: string, approve: boolean, { callId, reason }: { callId?: string; reason?: string }): Promise<Ticket> {
    if (callId !== undefined) {
      const path = `${ticketPath(ticket)}/approvals/${encodeURIComponent(callId)}`;
      return this.desk.request<Ticket>("POST", path, { body: { approve, ...(reason === undefined ? {} : { reason }) } });
    }
    const body = { [approve ? "approve_all" : "deny_all"]: true, ...(reason === undefined ? {} : { reason }) };
    return this.desk.request<Ticket>("POST", `${ticketPath(ticket)}/approvals`, { body });
  }

  /** Answers the question the ticket's agent asked (its `pending_question` unless `questionId` names it). */
  async answer(ticket: string, answer: unknown, options: { questionId?: string } = {}): Promise<Ticket> {
    let id = options.questionId;
    if (id === undefined) {
      const current = await this.get(ticket);
      if (!current.pending_question) throw new AgentDeskError(`${current.key} waits for no answer to a question`);
      id = current.pending_question.id;
    }
    return this.desk.request<Ticket>("POST", `${ticketPath(ticket)}/questions/${encodeURIComponent(id)}`, { body: { answer } });
  }

  /** Runs the ticket again as a new one; `tools: "recorded"` (the default) answers its calls from the original's. */
  replay(ticket: string, options: ReplayTicket = {}): Promise<Ticket> {
    return this.desk.request<Ticket>("POST", `${ticketPath(ticket)}/replay`, { body: options });
  }

  /**
   * The ticket's events from the first (or after seq `after`), then live; reconnects after a cut,
   * yields every persisted event once in seq order, and ends after the final one.
   */
  stream(ticket: string, options: { after?: number } = {}): AsyncGenerator<Event> {
    return this.desk.sse(`${ticketPath(ticket)}/events`, {}, new TicketStreamState(options.after));
  }
}

/** Tickets replayed by several arms and compared (`/v1/experiments`). */
export class Experiments {
  constructor(private readonly desk: AgentDesk) {}

  create(body: CreateExperiment): Promise<Experiment> {
    return this.desk.request<Experiment>("POST", "/v1/experiments", { body });
  }

  get(experiment: string): Promise<Experiment> {
    return this.desk.request<Experiment>("GET", experimentPath(experiment));
  }

  async list(): Promise<Experiment[]> {
    return (await this.desk.request<{ items: Experiment[] }>("GET", "/v1/experiments")).items;
  }

  cancel(experiment: string): Promise<Experiment> {
    return this.desk.request<Experiment>("POST", `${experimentPath(experiment)}/cancel`);
  }

  async delete(experiment: string): Promise<void> {
    await this.desk.request<unknown>("DELETE", experimentPath(experiment));
  }
}

export interface FirehoseOptions {
  kind?: string | string[];
  label?: string | string[];
  agent?: string | string[];
  /** Resume after this cursor (an event's `cursor`); without one the stream starts with new events. */
  cursor?: string | null;
}

export class Events {
  constructor(private readonly desk: AgentDesk) {}

  /** Every ticket's events; reconnects after a cut from the last cursor it delivered; never ends by itself. */
  stream(options: FirehoseOptions = {}): AsyncGenerator<Event> {
    const { cursor, ...query } = options;
    return this.desk.sse("/v1/events", query, new FirehoseState(cursor ?? null));
  }
}
