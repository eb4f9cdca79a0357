import { FirehoseState, SseParser, TicketStreamState } from "./sse.js";
export { FINAL_KINDS, SseParser } from "./sse.js";
/** Every error the client throws. */
export class AgentDeskError extends Error {
    constructor(message, options) {
        super(message, options);
        this.name = "AgentDeskError";
    }
}
/** The API answered with an error: HTTP `status`, the API's snake_case `code`, and `message`. */
export class ApiError extends AgentDeskError {
    status;
    code;
    retryAfterMs;
    constructor(status, code, message, retryAfterMs = null) {
        super(message);
        this.status = status;
        this.code = code;
        this.retryAfterMs = retryAfterMs;
        this.name = "ApiError";
    }
    static async fromResponse(resp) {
        const text = await resp.text().catch(() => "");
        let code = `http_${resp.status}`;
        let message = text.slice(0, 500).trim() || `HTTP ${resp.status}`;
        try {
            const error = JSON.parse(text).error;
            if (error && typeof error.code === "string" && typeof error.message === "string") {
                code = error.code;
                message = error.message;
            }
        }
        catch {
            // not the API's error body: keep the text
        }
        return new ApiError(resp.status, code, message, retryAfterMs(resp.headers.get("retry-after")));
    }
}
/** A stream gave up after too many consecutive failed connections; `cause` is the last one. */
export class StreamError extends AgentDeskError {
    cause;
    attempts;
    constructor(message, cause, attempts) {
        super(`${message} after ${attempts} attempts: ${String(cause)}`, { cause });
        this.cause = cause;
        this.attempts = attempts;
        this.name = "StreamError";
    }
}
function retryAfterMs(value) {
    if (!value)
        return null;
    const v = value.trim();
    if (/^[0-9]+$/.test(v))
        return Number(v) * 1000;
    const when = Date.parse(v);
    return Number.isNaN(when) ? null : Math.max(0, when - Date.now());
}
function sleep(ms) {
    return new Promise((resolve) => setTimeout(resolve, ms));
}
function uuid() {
    const c = globalThis.crypto;
    if (c?.randomUUID)
        return c.randomUUID();
    // Node 18 without the global crypto: uniqueness is all an idempotency key needs.
    return "xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx".replace(/[xy]/g, (ch) => {
        const r = (Math.random() * 16) | 0;
        return (ch === "x" ? r : (r & 0x3) | 0x8).toString(16);
    });
}
function ticketPath(ticket) {
    return `/v1/tickets/${encodeURIComponent(ticket)}`;
}
function experimentPath(experiment) {
    return `/v1/experiments/${encodeURIComponent(experiment)}`;
}
export class AgentDesk {
    options;
    baseUrl;
    tickets;
    events;
    experiments;
    opts;
    fetchImpl;
    constructor(options = {}) {
        this.options = options;
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
    headers(extra) {
        const h = { accept: "application/json" };
        if (this.options.token)
            h["authorization"] = `Bearer ${this.options.token}`;
        if (this.options.project)
            h["agentdesk-project"] = this.options.project;
        return { ...h, ...extra };
    }
    url(path, query) {
        const params = new URLSearchParams();
        for (const [k, v] of Object.entries(query ?? {})) {
            if (v === undefined || v === null)
                continue;
            params.set(k, Array.isArray(v) ? v.join(",") : String(v));
        }
        const qs = params.toString();
        return this.baseUrl + path + (qs ? `?${qs}` : "");
    }
    backoff(attempt) {
        return Math.min(this.opts.backoffCapMs, this.opts.backoffBaseMs * 2 ** attempt);
    }
    /**
     * One API call (`path` from the root: `/v1/stats`), retried on 429 and 503 as the options say;
     * the decoded JSON answer, or ApiError.
     */
    async request(method, path, options = {}) {
        const repeat = options.safeToRepeat ?? method === "GET";
        const headers = this.headers(options.headers);
        if (options.body !== undefined)
            headers["content-type"] = "application/json";
        for (let attempt = 0;; attempt++) {
            let delay;
            let resp;
            try {
                resp = await this.fetchImpl(this.url(path, options.query), {
                    method,
                    headers,
                    body: options.body === undefined ? undefined : JSON.stringify(options.body),
                });
            }
            catch (e) {
                if (!repeat || attempt >= this.opts.maxRetries) {
                    throw new AgentDeskError(`${method} ${path}: ${String(e)}`, { cause: e });
                }
                await sleep(this.backoff(attempt));
                continue;
            }
            if (resp.ok) {
                const text = await resp.text();
                return (text ? JSON.parse(text) : null);
            }
            const error = await ApiError.fromResponse(resp);
            delay = null;
            if ((error.status === 429 || error.status === 503) && attempt < this.opts.maxRetries) {
                delay = error.retryAfterMs ?? this.backoff(attempt);
                if (delay > this.opts.maxRetryWaitMs)
                    delay = null;
            }
            if (delay === null)
                throw error;
            await sleep(delay);
        }
    }
    /** @internal Every item of a list, page after page. */
    async *pages(path, query) {
        const q = { ...query };
        for (;;) {
            const page = await this.request("GET", path, { query: q });
            yield* page.items;
            if (!page.next_cursor)
                return;
            q["cursor"] = page.next_cursor;
        }
    }
    /** @internal An SSE stream that reconnects with Last-Event-ID as `state` says. */
    async *sse(path, query, state) {
        let failures = 0;
        let delay = 0;
        for (;;) {
            if (delay > 0)
                await sleep(delay);
            let why = null;
            const abort = new AbortController();
            let idle;
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
                if (resp.status !== 200 || !resp.body)
                    throw await ApiError.fromResponse(resp);
                const reader = resp.body.getReader();
                const parser = new SseParser();
                for (;;) {
                    const { done, value } = await reader.read();
                    if (done)
                        break;
                    watch();
                    for (const message of parser.feed(value)) {
                        failures = 0;
                        const event = state.accept(message);
                        if (event)
                            yield event;
                    }
                }
            }
            catch (e) {
                why = e;
            }
            finally {
                clearTimeout(idle);
                abort.abort();
            }
            if (why instanceof ApiError && why.status < 500 && why.status !== 429)
                throw why;
            if (state.ended(why === null))
                return;
            why ??= new AgentDeskError(state instanceof TicketStreamState ? "the stream ended before the ticket's final event" : "the stream ended");
            failures += 1;
            if (failures > this.opts.streamMaxFailures)
                throw new StreamError(`GET ${path}: gave up`, why, failures);
            delay = this.backoff(failures - 1) * (0.5 + Math.random() / 2);
            if (why instanceof ApiError && why.retryAfterMs !== null)
                delay = Math.max(delay, why.retryAfterMs);
        }
    }
}
export class Tickets {
    desk;
    constructor(desk) {
        this.desk = desk;
    }
    /**
     * Creates a ticket. The `Idempotency-Key` (generated when not given) makes retries safe: a
     * repeat returns the first ticket.
     */
    create(body, options = {}) {
        return this.desk.request("POST", "/v1/tickets", {
            body,
            headers: { "idempotency-key": options.idempotencyKey ?? uuid() },
            safeToRepeat: true,
        });
    }
    get(ticket) {
        return this.desk.request("GET", ticketPath(ticket));
    }
    /** Every matching ticket, page after page (`limit` is the page size). */
    list(options = {}) {
        return this.desk.pages("/v1/tickets", { ...options });
    }
    update(ticket, fields) {
        return this.desk.request("PATCH", ticketPath(ticket), { body: fields });
    }
    comment(ticket, text, author) {
        return this.desk.request("POST", `${ticketPath(ticket)}/comments`, {
            body: author === undefined ? { text } : { text, author },
        });
    }
    comments(ticket, options = {}) {
        return this.desk.pages(`${ticketPath(ticket)}/comments`, { ...options });
    }
    cancel(ticket) {
        return this.desk.request("POST", `${ticketPath(ticket)}/cancel`);
    }
    retry(ticket) {
        return this.desk.request("POST", `${ticketPath(ticket)}/retry`);
    }
    /** Approves a call that waits for approval, or (without `callId`) every pending one. */
    approve(ticket, options = {}) {
        return this.decide(ticket, true, options);
    }
    /** Denies a call (the model gets `reason`), or (without `callId`) every pending one. */
    deny(ticket, options = {}) {
        return this.decide(ticket, false, options);
    }
    decide(ticket, approve, { callId, reason }) {
        if (callId !== undefined) {
            const path = `${ticketPath(ticket)}/approvals/${encodeURIComponent(callId)}`;
            return this.desk.request("POST", path, { body: { approve, ...(reason === undefined ? {} : { reason }) } });
        }
        const body = { [approve ? "approve_all" : "deny_all"]: true, ...(reason === undefined ? {} : { reason }) };
        return this.desk.request("POST", `${ticketPath(ticket)}/approvals`, { body });
    }
    /** Answers the question the ticket's agent asked (its `pending_question` unless `questionId` names it). */
    async answer(ticket, answer, options = {}) {
        let id = options.questionId;
        if (id === undefined) {
            const current = await this.get(ticket);
            if (!current.pending_question)
                throw new AgentDeskError(`${current.key} waits for no answer to a question`);
            id = current.pending_question.id;
        }
        return this.desk.request("POST", `${ticketPath(ticket)}/questions/${encodeURIComponent(id)}`, { body: { answer } });
    }
    /** Runs the ticket again as a new one; `tools: "recorded"` (the default) answers its calls from the original's. */
    replay(ticket, options = {}) {
        return this.desk.request("POST", `${ticketPath(ticket)}/replay`, { body: options });
    }
    /**
     * The ticket's events from the first (or after seq `after`), then live; reconnects after a cut,
     * yields every persisted event once in seq order, and ends after the final one.
     */
    stream(ticket, options = {}) {
        return this.desk.sse(`${ticketPath(ticket)}/events`, {}, new TicketStreamState(options.after));
    }
}
/** Tickets replayed by several arms and compared (`/v1/experiments`). */
export class Experiments {
    desk;
    constructor(desk) {
        this.desk = desk;
    }
    create(body) {
        return this.desk.request("POST", "/v1/experiments", { body });
    }
    get(experiment) {
        return this.desk.request("GET", experimentPath(experiment));
    }
    async list() {
        return (await this.desk.request("GET", "/v1/experiments")).items;
    }
    cancel(experiment) {
        return this.desk.request("POST", `${experimentPath(experiment)}/cancel`);
    }
    async delete(experiment) {
        await this.desk.request("DELETE", experimentPath(experiment));
    }
}
export class Events {
    desk;
    constructor(desk) {
        this.desk = desk;
    }
    /** Every ticket's events; reconnects after a cut from the last cursor it delivered; never ends by itself. */
    stream(options = {}) {
        const { cursor, ...query } = options;
        return this.desk.sse("/v1/events", query, new FirehoseState(cursor ?? null));
    }
}
