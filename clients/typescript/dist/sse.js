/** A ticket's final events: its stream ends after the last of them. */
export const FINAL_KINDS = new Set(["ticket.done", "ticket.failed", "ticket.cancelled"]);
const REOPENING_KINDS = new Set([
    "ticket.created",
    "ticket.started",
    "ticket.requeued",
    "ticket.waiting",
]);
/** Incremental parser: feed text, get complete messages; a message cut short is never returned. */
export class SseParser {
    buf = "";
    data = [];
    id = null;
    event = "";
    decoder = new TextDecoder();
    retryMs = null;
    *feed(chunk) {
        this.buf += typeof chunk === "string" ? chunk : this.decoder.decode(chunk, { stream: true });
        for (;;) {
            const lf = this.buf.indexOf("\n");
            const cr = this.buf.indexOf("\r");
            let end;
            let next;
            if (cr === -1 || (lf !== -1 && lf < cr)) {
                if (lf === -1)
                    return;
                end = lf;
                next = lf + 1;
            }
            else {
                // A CR at the very end waits for the next chunk, which may start with its LF.
                if (cr + 1 === this.buf.length)
                    return;
                end = cr;
                next = this.buf[cr + 1] === "\n" ? cr + 2 : cr + 1;
            }
            const line = this.buf.slice(0, end);
            this.buf = this.buf.slice(next);
            const message = this.line(line);
            if (message)
                yield message;
        }
    }
    line(line) {
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
        if (line.startsWith(":"))
            return { data: null, id: null, event: "" };
        const colon = line.indexOf(":");
        const name = colon === -1 ? line : line.slice(0, colon);
        let value = colon === -1 ? "" : line.slice(colon + 1);
        if (value.startsWith(" "))
            value = value.slice(1);
        if (name === "data")
            this.data.push(value);
        else if (name === "id" && !value.includes("\0"))
            this.id = value;
        else if (name === "event")
            this.event = value;
        else if (name === "retry" && /^[0-9]+$/.test(value))
            this.retryMs = Number(value);
        return null;
    }
}
function parseEvent(message, cursor) {
    if (message.data === null)
        return null;
    let value;
    try {
        value = JSON.parse(message.data);
    }
    catch {
        return null;
    }
    if (typeof value !== "object" || value === null || Array.isArray(value))
        return null;
    return { ...value, cursor };
}
/** A ticket stream across connections: each persisted event once, in seq order. */
export class TicketStreamState {
    last;
    /**
     * Whether the latest status event seen is final. The desk ends the stream once it has sent all
     * the finished ticket logged (a cancel may be followed by the text it kept), so a clean end in
     * this state is the end, and any other end is a cut.
     */
    finished = false;
    constructor(after) {
        this.last = after ?? 0;
    }
    headers() {
        return this.last > 0 ? { "Last-Event-ID": String(this.last) } : {};
    }
    accept(message) {
        const event = parseEvent(message, null);
        if (event === null)
            return null;
        const seq = event.seq;
        if (seq === null || seq === undefined)
            return event; // live-only: passed through, never replayed
        if (seq <= this.last)
            return null;
        this.last = seq;
        if (FINAL_KINDS.has(event.kind))
            this.finished = true;
        else if (REOPENING_KINDS.has(event.kind))
            this.finished = false;
        return event;
    }
    ended(clean) {
        return clean && this.finished;
    }
}
/** The firehose across connections: resumes after the last cursor it delivered. */
export class FirehoseState {
    cursor;
    constructor(cursor = null) {
        this.cursor = cursor;
    }
    headers() {
        return this.cursor ? { "Last-Event-ID": this.cursor } : {};
    }
    accept(message) {
        // A stream opened without a cursor starts with its position, so a cut before the first event
        // loses nothing either.
        if (message.data === null && message.id) {
            this.cursor = message.id;
            return null;
        }
        const event = parseEvent(message, message.id);
        if (event !== null && message.id)
            this.cursor = message.id;
        return event;
    }
    ended() {
        return false;
    }
}
