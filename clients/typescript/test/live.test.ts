// Against a live desk whose model is scripts/fake-model.py (every request closes the ticket with
// "ok"; one whose task says "slow" hangs): AGENTDESK_URL is the desk, AGENTDESK_CUT_URL the same
// desk behind clients/cut-proxy.py, AGENTDESK_TOKEN its token. .ci/clients.sh sets them up.
import assert from "node:assert/strict";
import { before, test } from "node:test";

import { AgentDesk, ApiError, type Event } from "../src/index.js";

const URL = process.env["AGENTDESK_URL"];
const CUT_URL = process.env["AGENTDESK_CUT_URL"];
const token = process.env["AGENTDESK_TOKEN"] ?? null;
const skip = !URL || !CUT_URL ? "AGENTDESK_URL and AGENTDESK_CUT_URL are not set" : false;
const LABEL = `ts-${Math.random().toString(16).slice(2, 10)}`;
const desk = new AgentDesk({ baseUrl: URL ?? "", token });
const cutDesk = new AgentDesk({ baseUrl: CUT_URL ?? "", token, backoffBaseMs: 50 });

before(async () => {
  if (skip) return;
  // An agent of this suite's own, so that the firehose can be filtered to its tickets.
  await desk.request("PUT", `/v1/agents/${LABEL}`, { body: { role: "Answer.", model: "fake", labels: [LABEL] } });
});

async function cuts(path: string, containing = ""): Promise<number> {
  const stats = (await (await fetch(`${CUT_URL}/__stats`)).json()) as Record<string, { cuts: number }>;
  return Object.entries(stats)
    .filter(([k]) => k.split("?")[0] === path && k.includes(containing))
    .reduce((n, [, v]) => n + v.cuts, 0);
}

function checkSeqs(events: Event[]): void {
  const seqs = events.flatMap((e) => (e.seq == null ? [] : [e.seq]));
  assert.deepEqual(seqs, seqs.map((_, i) => i + 1));
}

test("a ticket through the model", { skip }, async () => {
  const t = await desk.tickets.create({ task: "say ok", labels: [LABEL] });
  assert.equal(t.status, "todo");
  const events: Event[] = [];
  let text = ""; // the model's text, when the stream was open while it streamed (deltas are live only)
  for await (const ev of desk.tickets.stream(t.key)) {
    events.push(ev);
    if (ev.kind === "text.delta") text += ev.data.delta; // ev.data is typed by ev.kind
  }
  checkSeqs(events);
  const last = events.at(-1)!;
  assert.equal(last.kind, "ticket.done");
  assert.ok(text === "" || text === "Done. ", text);
  const done = await desk.tickets.get(t.key);
  assert.deepEqual([done.status, done.result], ["done", "ok"]);
  const keys: string[] = [];
  for await (const x of desk.tickets.list({ status: "done", label: LABEL })) keys.push(x.key);
  assert.ok(keys.includes(t.key));
  await desk.tickets.comment(t.key, "Once more, please.");
  const missing = await desk.tickets.get("TICKET-999999999").catch((e: unknown) => e);
  assert.ok(missing instanceof ApiError && missing.status === 404 && missing.code === "not_found");
});

test("a stream cut mid-ticket yields each event once and ends", { skip }, async () => {
  const t = await desk.tickets.create({ task: "slow: take your time", labels: [LABEL] });
  const events: Event[] = [];
  for await (const ev of cutDesk.tickets.stream(t.key)) {
    events.push(ev);
    if (ev.kind === "request.started") await desk.tickets.cancel(t.key); // the model hangs
  }
  checkSeqs(events);
  assert.ok(events.some((e) => e.kind === "ticket.cancelled"));
  const whole: [number | null | undefined, string][] = [];
  for await (const e of desk.tickets.stream(t.key)) whole.push([e.seq, e.kind]);
  assert.deepEqual(events.filter((e) => e.seq != null).map((e) => [e.seq, e.kind]), whole);
  assert.ok((await cuts(`/v1/tickets/${t.key}/events`)) >= 2);
});

/** A firehose cursor to resume from: read the firehose while creating tickets until one shows up. */
async function firehoseCursor(): Promise<string> {
  const stream = desk.events.stream({ kind: "ticket.created", label: LABEL });
  const first = stream.next();
  for (;;) {
    await desk.tickets.create({ task: "say ok", labels: [LABEL] });
    const got = await Promise.race([first, new Promise((r) => setTimeout(r, 500, null))]);
    if (got) {
      await stream.return(undefined);
      return (got as IteratorResult<Event>).value!.cursor!;
    }
  }
}

test("the firehose resumes after cuts", { skip }, async () => {
  const cursor = await firehoseCursor();
  const keys: string[] = [];
  for (let i = 0; i < 3; i++) keys.push((await desk.tickets.create({ task: "say ok", labels: [LABEL] })).key);
  const seen: string[] = [];
  const done = new Set<string>();
  for await (const ev of cutDesk.events.stream({ kind: "ticket.*", label: LABEL, cursor })) {
    assert.ok(ev.cursor);
    seen.push(`${ev.ticket_key} ${ev.seq}`);
    if (ev.kind === "ticket.done" && ev.ticket_key) done.add(ev.ticket_key);
    if (keys.every((k) => done.has(k))) break;
  }
  assert.equal(new Set(seen).size, seen.length, seen.join(", "));
  for (const key of keys) {
    const mine = seen.filter((s) => s.startsWith(`${key} `)).map((s) => Number(s.split(" ")[1]));
    assert.deepEqual(mine, [...mine].sort((a, b) => a - b));
    assert.ok(mine.length >= 3, `${key}: ${mine}`);
  }
  assert.ok((await cuts("/v1/events", LABEL)) >= 2);
});

test("a project token acts in its project, limits are retried and quotas raised", { skip }, async () => {
  const suffix = Math.random().toString(16).slice(2, 10);
  const name = `ts-${suffix}`;
  const prefix = "TS" + [...suffix.slice(0, 6)].map((c) => String.fromCharCode(65 + (parseInt(c, 16) % 26))).join("");
  await desk.request("POST", "/v1/projects", {
    body: { name, key_prefix: prefix, rate_limit: { requests_per_s: 5, burst: 2 }, quotas: { tickets_per_day: 2 } },
  });
  await new AgentDesk({ baseUrl: URL ?? "", token, project: name }).request("PUT", "/v1/agents/worker", {
    body: { model: "fake" },
  });
  const created = (await desk.request("POST", `/v1/projects/${name}/tokens`, {
    body: { name: "ci", scopes: ["write"] },
  })) as { token: string };
  const own = new AgentDesk({ baseUrl: URL ?? "", token: created.token });
  const t = await own.tickets.create({ task: "say ok" });
  assert.equal(t.key, `${prefix}-1`);
  const events: Event[] = [];
  for await (const ev of own.tickets.stream(t.key)) events.push(ev);
  checkSeqs(events);
  assert.equal(events.at(-1)!.kind, "ticket.done");
  // Past the burst of two the desk answers 429 with Retry-After: the client waits and goes on.
  for (let i = 0; i < 6; i++) assert.equal((await own.tickets.get(t.key)).status, "done");
  await own.tickets.create({ task: "the day's second" });
  // The day's quota is not waited out (its Retry-After runs to midnight): thrown at once.
  const over = await own.tickets.create({ task: "one too many" }).catch((e: unknown) => e);
  assert.ok(over instanceof ApiError && over.status === 429 && over.code === "quota_exceeded", String(over));
  const hidden = await own.tickets.get("TICKET-1").catch((e: unknown) => e);
  assert.ok(hidden instanceof ApiError && hidden.status === 404);
  const other = new AgentDesk({ baseUrl: URL ?? "", token: created.token, project: "default" });
  const refused = await other.tickets.get(t.key).catch((e: unknown) => e);
  assert.ok(refused instanceof ApiError && refused.status === 403 && refused.code === "forbidden");
});

test("a replay, an experiment, and answers where nothing waits", { skip }, async () => {
  const t = await desk.tickets.create({ task: "say ok", labels: [LABEL] });
  for await (const _ of desk.tickets.stream(t.key));
  const replay = await desk.tickets.replay(t.key, { model: "fake" });
  assert.equal((replay.metadata as Record<string, unknown>)["replay_of"], t.key);
  let last = "";
  for await (const ev of desk.tickets.stream(replay.key)) last = ev.kind;
  assert.equal(last, "ticket.done");
  const x = await desk.experiments.create({ name: "two arms", tickets: [t.key], arms: [{ name: "a" }, { name: "b", model: "fake" }] });
  const deadline = Date.now() + 30_000;
  let shown = await desk.experiments.get(x.id);
  while (shown.status !== "done") {
    assert.ok(Date.now() < deadline, JSON.stringify(shown));
    await new Promise((r) => setTimeout(r, 100));
    shown = await desk.experiments.get(x.id);
  }
  assert.deepEqual(shown.arms.map((a) => [a.name, a.done]), [["a", 1], ["b", 1]]);
  assert.ok((await desk.experiments.list()).some((e) => e.id === x.id));
  await desk.experiments.delete(x.id);
  const none = await desk.tickets.answer(t.key, "x").catch((e: unknown) => e);
  assert.ok(none instanceof Error && none.message.includes("waits for no answer"), String(none));
  const nothing = await desk.tickets.approve(t.key).catch((e: unknown) => e);
  assert.ok(nothing instanceof ApiError && nothing.status === 409, String(nothing));
});
