import type { components } from "./schema.js";
/** An event as the desk sends it: `kind` tells what `data` holds. */
export type TicketEvent = components["schemas"]["TicketEvent"];
/** A stream's event; `cursor` is the firehose's resume point (null on ticket streams and live events). */
export type Event = TicketEvent & {
    cursor: string | null;
};
/** A ticket's final events: its stream ends after the last of them. */
export declare const FINAL_KINDS: ReadonlySet<string>;
export interface SseMessage {
    /** null for a comment (`: ping`). */
    data: string | null;
    id: string | null;
    event: string;
}
/** Incremental parser: feed text, get complete messages; a message cut short is never returned. */
export declare class SseParser {
    private buf;
    private data;
    private id;
    private event;
    private decoder;
    retryMs: number | null;
    feed(chunk: Uint8Array | string): Generator<SseMessage>;
    private line;
}
export interface StreamState {
    headers(): Record<string, string>;
    accept(message: SseMessage): Event | null;
    /** Whether an end of the connection (clean or not) is the end of the stream. */
    ended(clean: boolean): boolean;
}
/** A ticket stream across connections: each persisted event once, in seq order. */
export declare class TicketStreamState implements StreamState {
    last: number;
    /**
     * Whether the latest status event seen is final. The desk ends the stream once it has sent all
     * the finished ticket logged (a cancel may be followed by the text it kept), so a clean end in
     * this state is the end, and any other end is a cut.
     */
    finished: boolean;
    constructor(after?: number | null);
    headers(): Record<string, string>;
    accept(message: SseMessage): Event | null;
    ended(clean: boolean): boolean;
}
/** The firehose across connections: resumes after the last cursor it delivered. */
export declare class FirehoseState implements StreamState {
    cursor: string | null;
    constructor(cursor?: string | null);
    headers(): Record<string, string>;
    accept(message: SseMessage): Event | null;
    ended(): boolean;
}
