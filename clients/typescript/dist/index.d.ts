import type { components } from "./schema.js";
import { type Event, type StreamState } from "./sse.js";
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
export declare class AgentDeskError extends Error {
    constructor(message: string, options?: {
        cause?: unknown;
    });
}
/** The API answered with an error: HTTP `status`, the API's snake_case `code`, and `message`. */
export declare class ApiError extends AgentDeskError {
    readonly status: number;
    readonly code: string;
    readonly retryAfterMs: number | null;
    constructor(status: number, code: string, message: string, retryAfterMs?: number | null);
    static fromResponse(resp: Response): Promise<ApiError>;
}
/** A stream gave up after too many consecutive failed connections; `cause` is the last one. */
export declare class StreamError extends AgentDeskError {
    readonly cause: unknown;
    readonly attempts: number;
    constructor(message: string, cause: unknown, attempts: number);
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
export declare class AgentDesk {
    private readonly options;
    readonly baseUrl: string;
    readonly tickets: Tickets;
    readonly events: Events;
    readonly experiments: Experiments;
    private readonly opts;
    private readonly fetchImpl;
    constructor(options?: AgentDeskOptions);
    private headers;
    private url;
    private backoff;
    /**
     * One API call (`path` from the root: `/v1/stats`), retried on 429 and 503 as the options say;
     * the decoded JSON answer, or ApiError.
     */
    request<T = unknown>(method: string, path: string, options?: RequestOptions): Promise<T>;
    /** @internal Every item of a list, page after page. */
    pages<T>(path: string, query: Query): AsyncGenerator<T>;
    /** @internal An SSE stream that reconnects with Last-Event-ID as `state` says. */
    sse(path: string, query: Query, state: StreamState): AsyncGenerator<Event>;
}
export declare class Tickets {
    private readonly desk;
    constructor(desk: AgentDesk);
    /**
     * Creates a ticket. The `Idempotency-Key` (generated when not given) makes retries safe: a
     * repeat returns the first ticket.
     */
    create(body: CreateTicket & Record<string, unknown>, options?: {
        idempotencyKey?: string;
    }): Promise<Ticket>;
    get(ticket: string): Promise<Ticket>;
    /** Every matching ticket, page after page (`limit` is the page size). */
    list(options?: ListTicketsOptions): AsyncGenerator<Ticket>;
    update(ticket: string, fields: components["schemas"]["PatchTicket"]): Promise<Ticket>;
    comment(ticket: string, text: string, author?: string): Promise<Comment>;
    comments(ticket: string, options?: {
        limit?: number;
    }): AsyncGenerator<Comment>;
    cancel(ticket: string): Promise<Ticket>;
    retry(ticket: string): Promise<Ticket>;
    /** Approves a call that waits for approval, or (without `callId`) every pending one. */
    approve(ticket: string, options?: {
        callId?: string;
        reason?: string;
    }): Promise<Ticket>;
    /** Denies a call (the model gets `reason`), or (without `callId`) every pending one. */
    deny(ticket: string, options?: {
        callId?: string;
        reason?: string;
    }): Promise<Ticket>;
    private decide;
    /** Answers the question the ticket's agent asked (its `pending_question` unless `questionId` names it). */
    answer(ticket: string, answer: unknown, options?: {
        questionId?: string;
    }): Promise<Ticket>;
    /** Runs the ticket again as a new one; `tools: "recorded"` (the default) answers its calls from the original's. */
    replay(ticket: string, options?: ReplayTicket): Promise<Ticket>;
    /**
     * The ticket's events from the first (or after seq `after`), then live; reconnects after a cut,
     * yields every persisted event once in seq order, and ends after the final one.
     */
    stream(ticket: string, options?: {
        after?: number;
    }): AsyncGenerator<Event>;
}
/** Tickets replayed by several arms and compared (`/v1/experiments`). */
export declare class Experiments {
    private readonly desk;
    constructor(desk: AgentDesk);
    create(body: CreateExperiment): Promise<Experiment>;
    get(experiment: string): Promise<Experiment>;
    list(): Promise<Experiment[]>;
    cancel(experiment: string): Promise<Experiment>;
    delete(experiment: string): Promise<void>;
}
export interface FirehoseOptions {
    kind?: string | string[];
    label?: string | string[];
    agent?: string | string[];
    /** Resume after this cursor (an event's `cursor`); without one the stream starts with new events. */
    cursor?: string | null;
}
export declare class Events {
    private readonly desk;
    constructor(desk: AgentDesk);
    /** Every ticket's events; reconnects after a cut from the last cursor it delivered; never ends by itself. */
    stream(options?: FirehoseOptions): AsyncGenerator<Event>;
}
