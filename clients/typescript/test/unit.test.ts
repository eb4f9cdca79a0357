// The client against a stand-in desk (test/double.ts): streams cut at every byte, retries,
// errors, headers and pages.
import assert from "node:assert/strict";
import { afterEach, beforeEach, test } from "node:test";

import { AgentDesk, ApiError, SseParser, StreamError, type Event } from "../src/index.js";
import { Double, event, frame, ticketJson } from "./double.js";

const FAST = { backoffBaseMs: 1, backoffCapMs: 10 };
let double: Double;

beforeEach(async () => {
  double = await new Double().start();
});
afterEach(async () => {
  await double.close();
});

function doneTicket(): void {
  double.ticketEvents = [
    event(1, "ticket.created"),
    event(2, "ticket.started", { agent: "default", attempt: 1 }),
    event(3, "request.started", { model: "m" }),
    event(null, "text.delta", { delta: "Hel" }),
    event(null, "text.delta", { delta: "lo" }),
    event(4, "request.finished", { model: "m" }),
    event(5, "comment.created", { comment: {} }),
    event(6, "ticket.done", { result: "ok" }),
  ];
}

function fullLength(): number {
  return Buffer.byteLength(double.ticketBody(0, true)[0]);
}

async function collect(stream: AsyncIterable<Event>): Promise<Event[]> {
  const out: Event[] = [];
  for await (const ev of stream) out.push(ev);
  return out;
}

function checkOnceInOrder(events: Event[], last: number, where: string): void {
  const seqs = events.flatMap((e) => (e.seq === null || e.seq === undefined ? [] : [e.seq]));
  assert.deepEqual(seqs, Array.from({ length: last }, (_, i) => i + 1), where);
  const deltas = events.flatMap((e) => (e.kind === "text.delta" ? [e.data.delta] : []));
  assert.equal(new Set(deltas).size, deltas.length, where);
}

for (const mode of ["abrupt", "clean"] as const) {
  test(`a ticket stream cut ${mode}ly at every byte yields each seq once, in order, and ends`, async () => {
    doneTicket();
    double.overlap = 2;
    const desk = new AgentDesk({ baseUrl: double.url, ...FAST });
    for (let at = 0; at <= fullLength(); at++) {
      double.cuts = [[mode, at]];
      double.streamConnections = 0;
      const events = await collect(desk.tickets.stream("TICKET-1"));
      checkOnceInOrder(events, 6, `cut at ${at}`);
      assert.equal(events.at(-1)?.kind, "ticket.done");
      assert.ok(double.streamConnections <= 2, `cut at ${at}: ${double.streamConnections} connections`);
    }
  });
}

test("a cancel followed by its kept text is read to the end after a cut between them", async () => {
  double.ticketEvents = [
    event(1, "ticket.created"),
    event(2, "ticket.started"),
    event(3, "ticket.cancelled"),
    event(4, "comment.created", { comment: { author: "assistant" } }),
  ];
  const desk = new AgentDesk({ baseUrl: double.url, ...FAST });
  for (let at = 0; at <= fullLength(); at += 2) {
    double.cuts = [["abrupt", at]];
    double.streamConnections = 0;
    checkOnceInOrder(await collect(desk.tickets.stream("TICKET-1")), 4, `cut at ${at}`);
  }
});

test("the firehose resumes from its cursor after a cut anywhere", async () => {
  double.firehose = [1, 2, 3, 4, 5].map((i) => [`7-${i}`, event(1, "ticket.created", {}, `TICKET-${i}`)]);
  const size = Buffer.byteLength("retry: 10\n\n" + double.firehose.map(([c, e]) => frame(e, c)).join(""));
  const desk = new AgentDesk({ baseUrl: double.url, ...FAST });
  for (let at = 0; at <= size; at += 3) {
    for (const mode of ["abrupt", "clean"] as const) {
      double.cuts = [[mode, at]];
      double.streamConnections = 0;
      const got: [string | null, string | null][] = [];
      for await (const ev of desk.events.stream({ kind: "ticket.*" })) {
        got.push([ev.cursor, ev.ticket_key]);
        if (got.length === 5) break;
      }
      assert.deepEqual(got, double.firehose.map(([c, e]) => [c, e.ticket_key]), `${mode} cut at ${at}`);
    }
  }
  assert.match(double.requests[0]!.url, /kind=ticket\.\*/);
});

test("a stream gives up after consecutive failures and says why", async () => {
  double.answer("GET", "/v1/tickets/TICKET-1/events", 503, { error: { code: "unavailable", message: "down" } });
  const desk = new AgentDesk({ baseUrl: double.url, streamMaxFailures: 3, ...FAST });
  const error = await collect(desk.tickets.stream("TICKET-1")).catch((e: unknown) => e);
  assert.ok(error instanceof StreamError, String(error));
  assert.equal(error.attempts, 4);
  assert.ok(error.cause instanceof ApiError && error.cause.status === 503);
});

test("a stream of an unknown ticket is an ApiError at once", async () => {
  double.answer("GET", "/v1/tickets/NOPE-1/events", 404, { error: { code: "not_found", message: "no ticket" } });
  const desk = new AgentDesk({ baseUrl: double.url, ...FAST });
  const error = await collect(desk.tickets.stream("NOPE-1")).catch((e: unknown) => e);
  assert.ok(error instanceof ApiError);
  assert.deepEqual([error.status, error.code], [404, "not_found"]);
  assert.equal(double.requests.length, 1);
});

test("create sends the token, the project and a generated Idempotency-Key", async () => {
  double.answer("POST", "/v1/tickets", 201, ticketJson());
  const desk = new AgentDesk({ baseUrl: `${double.url}/`, token: "s3cret", project: "ops" });
  const t = await desk.tickets.create({ task: "hello", labels: ["a"] });
  await desk.tickets.create({ task: "hello" }, { idempotencyKey: "k-1" });
  assert.deepEqual([t.key, t.status], ["TICKET-1", "todo"]);
  const [first, second] = double.requests;
  assert.equal(first!.headers["authorization"], "Bearer s3cret");
  assert.equal(first!.headers["agentdesk-project"], "ops");
  assert.equal(String(first!.headers["idempotency-key"]).length, 36);
  assert.equal(second!.headers["idempotency-key"], "k-1");
  assert.deepEqual(JSON.parse(first!.body), { task: "hello", labels: ["a"] });
});

test("429 is retried after Retry-After with the same key", async () => {
  double.answer("POST", "/v1/tickets", 429, { error: { code: "rate_limited", message: "slow down" } }, { "retry-after": "1" });
  double.answer("POST", "/v1/tickets", 201, ticketJson());
  const desk = new AgentDesk({ baseUrl: double.url });
  const started = Date.now();
  await desk.tickets.create({ task: "x" });
  assert.ok(Date.now() - started >= 950);
  assert.equal(double.requests.length, 2);
  assert.equal(double.requests[0]!.headers["idempotency-key"], double.requests[1]!.headers["idempotency-key"]);
});

test("503 is retried with backoff, then thrown", async () => {
  double.answer("GET", "/v1/tickets/TICKET-1", 503, { error: { code: "unavailable", message: "busy" } });
  const desk = new AgentDesk({ baseUrl: double.url, maxRetries: 2, ...FAST });
  const error = await desk.tickets.get("TICKET-1").catch((e: unknown) => e);
  assert.ok(error instanceof ApiError);
  assert.deepEqual([error.status, error.code, error.message], [503, "unavailable", "busy"]);
  assert.equal(double.requests.length, 3);
});

test("a Retry-After beyond the limit is thrown at once", async () => {
  double.answer("POST", "/v1/tickets", 429, { error: { code: "quota_exceeded", message: "tomorrow" } }, { "retry-after": "36000" });
  const error = await new AgentDesk({ baseUrl: double.url }).tickets.create({ task: "x" }).catch((e: unknown) => e);
  assert.ok(error instanceof ApiError && error.code === "quota_exceeded" && error.retryAfterMs === 36_000_000);
  assert.equal(double.requests.length, 1);
});

test("errors carry the API's code; other bodies keep their text", async () => {
  double.answer("POST", "/v1/tickets/TICKET-1/retry", 409, { error: { code: "conflict", message: "not failed" } });
  double.answer("GET", "/v1/tickets/TICKET-9", 500, "plain text");
  const desk = new AgentDesk({ baseUrl: double.url });
  const conflict = await desk.tickets.retry("TICKET-1").catch((e: unknown) => e);
  assert.ok(conflict instanceof ApiError);
  assert.deepEqual([conflict.status, conflict.code, conflict.message], [409, "conflict", "not failed"]);
  const internal = await desk.tickets.get("TICKET-9").catch((e: unknown) => e);
  assert.ok(internal instanceof ApiError);
  assert.deepEqual([internal.status, internal.code, internal.message], [500, "http_500", "plain text"]);
  assert.equal(double.requests.length, 2);
});

test("list follows next_cursor; comment, cancel", async () => {
  double.answer("GET", "/v1/tickets", 200, (req: { url?: string }) => {
    const second = (req.url ?? "").includes("cursor=p2");
    const keys = second ? ["TICKET-3"] : ["TICKET-1", "TICKET-2"];
    return { items: keys.map((k) => ticketJson(k, "done")), next_cursor: second ? null : "p2" };
  });
  double.answer("POST", "/v1/tickets/TICKET-1/comments", 201, {
    id: "c", ticket_id: "t", seq: 1, author: "user", content: [{ type: "text", text: "hi" }], created_at: "x",
  });
  double.answer("POST", "/v1/tickets/TICKET-1/cancel", 200, ticketJson("TICKET-1", "cancelled"));
  const desk = new AgentDesk({ baseUrl: double.url });
  const keys: string[] = [];
  for await (const t of desk.tickets.list({ status: ["done", "failed"], label: "x" })) keys.push(t.key);
  assert.deepEqual(keys, ["TICKET-1", "TICKET-2", "TICKET-3"]);
  assert.match(double.requests[0]!.url, /status=done%2Cfailed/);
  const comment = await desk.tickets.comment("TICKET-1", "hi");
  assert.deepEqual(comment.content[0], { type: "text", text: "hi" });
  assert.equal((await desk.tickets.cancel("TICKET-1")).status, "cancelled");
});

test("the SSE parser handles every line ending and split", () => {
  const text = ": ping\r\nid: 1\r\ndata: a\r\ndata: b\r\n\r\nid: 2\rdata: c\r\rdata: d é\n\n";
  const bytes = new TextEncoder().encode(text);
  for (let size = 1; size <= bytes.length; size++) {
    const parser = new SseParser();
    const got: [string | null, string | null][] = [];
    for (let i = 0; i < bytes.length; i += size) {
      for (const m of parser.feed(bytes.subarray(i, i + size))) got.push([m.id, m.data]);
    }
    assert.deepEqual(got, [[null, null], ["1", "a\nb"], ["2", "c"], [null, "d é"]], `split ${size}`);
  }
});

test("an id alone is the firehose's position to resume from", async () => {
  const { FirehoseState } = await import("../src/sse.js");
  const parser = new SseParser();
  const messages = [...parser.feed(new TextEncoder().encode("retry: 1000\n\nid: 7-3\n\n"))];
  assert.deepEqual(messages.map((m) => [m.id, m.data]), [["7-3", null]]);
  const state = new FirehoseState();
  assert.equal(state.accept(messages[0]!), null, "no event");
  assert.deepEqual(state.headers(), { "Last-Event-ID": "7-3" });
});
