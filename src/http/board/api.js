// The API from the page: JSON requests and server-sent event streams, with the bearer token kept in
// localStorage. Streams use fetch, not EventSource, because EventSource cannot send the
// Authorization header, and a token must never go into a URL (URLs end up in logs).

const TOKEN_KEY = 'agentdesk.token';

export const token = {
  get: () => localStorage.getItem(TOKEN_KEY) || '',
  set: (value) => localStorage.setItem(TOKEN_KEY, value),
  clear: () => localStorage.removeItem(TOKEN_KEY),
};

// The project a desk token acts in (`AgentDesk-Project`); a project token's own is read from the
// answers, which name the project they acted in.
const PROJECT_KEY = 'agentdesk.project';

export const project = {
  get: () => localStorage.getItem(PROJECT_KEY) || '',
  set: (value) => (value ? localStorage.setItem(PROJECT_KEY, value) : localStorage.removeItem(PROJECT_KEY)),
  /** The project the last answer acted in. */
  acting: '',
};

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

let unauthorized = () => {};
/** Called on every 401: the page then asks for a token. */
export function onUnauthorized(handler) {
  unauthorized = handler;
}

function headers(extra) {
  const all = { ...extra };
  const t = token.get();
  if (t) all.Authorization = `Bearer ${t}`;
  const p = project.get();
  if (p) all['AgentDesk-Project'] = p;
  return all;
}

function noteProject(response) {
  const acting = response.headers.get('AgentDesk-Project');
  if (acting) project.acting = acting;
}

async function failure(response) {
  let body = null;
  try {
    body = await response.json();
  } catch {
    // Not JSON: the status says enough.
  }
  const error = (body && body.error) || {};
  if (response.status === 401) unauthorized();
  return new ApiError(response.status, error.code || `http_${response.status}`, error.message || response.statusText);
}

/** A JSON request; resolves to the answer's body, rejects with an ApiError. */
export async function api(method, path, body) {
  const init = { method, headers: headers(body === undefined ? {} : { 'Content-Type': 'application/json' }) };
  if (body !== undefined) init.body = JSON.stringify(body);
  const response = await fetch(path, init);
  noteProject(response);
  if (!response.ok) throw await failure(response);
  const text = await response.text();
  return text ? JSON.parse(text) : null;
}

/** Every item of a list endpoint, following `next_cursor` (at most `max`). */
export async function listAll(path, max = 1000) {
  const items = [];
  let cursor = null;
  do {
    const sep = path.includes('?') ? '&' : '?';
    const page = await api('GET', `${path}${sep}limit=200${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`);
    items.push(...page.items);
    cursor = page.next_cursor;
  } while (cursor && items.length < max);
  return items;
}

/** Query string from an object, leaving out empty values. */
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v != null && v !== '') q.set(k, v);
  const s = q.toString();
  return s ? `?${s}` : '';
}

const sleep = (ms, signal) =>
  new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal.addEventListener('abort', () => {
      clearTimeout(timer);
      resolve();
    });
  });

/**
 * Follows an SSE endpoint: `onEvent(json)` for each event. After a drop it reconnects with
 * `Last-Event-ID`, so persisted events are neither lost nor repeated. When the server ends the
 * stream and `isDone()` agrees (a ticket's stream ends after its final event), it stops until
 * `resume()`; any other end (a restarting server) is a drop.
 * `onState('open' | 'reconnecting' | 'ended')` reports the connection.
 */
export function follow(path, { onEvent, onState = () => {}, isDone = () => false }) {
  const controller = new AbortController();
  let lastId = null;
  let retryMs = 1000;
  let running = false;

  async function run() {
    running = true;
    while (!controller.signal.aborted) {
      try {
        const extra = { Accept: 'text/event-stream' };
        if (lastId != null) extra['Last-Event-ID'] = lastId;
        const response = await fetch(path, { headers: headers(extra), signal: controller.signal, cache: 'no-store' });
        if (!response.ok) throw await failure(response);
        onState('open');
        retryMs = 1000;
        await readFrames(response.body, (frame) => {
          if (frame.id != null) lastId = frame.id;
          if (frame.retry != null) retryMs = frame.retry;
          if (!frame.data) return;
          let event;
          try {
            event = JSON.parse(frame.data);
          } catch {
            return;
          }
          onEvent(event);
        });
        if (isDone()) {
          // A clean end: the server has nothing more to send on this stream.
          running = false;
          onState('ended');
          return;
        }
        onState('reconnecting');
        await sleep(retryMs, controller.signal);
      } catch (error) {
        if (controller.signal.aborted) break;
        onState('reconnecting', error);
        // Back off further while the server refuses (a missing token, a restart).
        retryMs = Math.min(error instanceof ApiError ? retryMs * 2 : retryMs, 15000);
        await sleep(retryMs, controller.signal);
      }
    }
    running = false;
  }

  run();
  return {
    close: () => controller.abort(),
    /** Starts again after a clean end, from the last event seen. */
    resume: () => {
      if (!running && !controller.signal.aborted) run();
    },
  };
}

/** Reads `text/event-stream` frames from a body stream (the HTML standard's format). */
async function readFrames(body, onFrame) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  let data = [];
  let id = null;
  let retry = null;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let newline;
    while ((newline = buffer.indexOf('\n')) >= 0) {
      let line = buffer.slice(0, newline);
      buffer = buffer.slice(newline + 1);
      if (line.endsWith('\r')) line = line.slice(0, -1);
      if (line === '') {
        if (data.length || id != null || retry != null) onFrame({ id, retry, data: data.join('\n') });
        data = [];
        id = null;
        retry = null;
        continue;
      }
      if (line.startsWith(':')) continue;
      const colon = line.indexOf(':');
      const field = colon < 0 ? line : line.slice(0, colon);
      let fieldValue = colon < 0 ? '' : line.slice(colon + 1);
      if (fieldValue.startsWith(' ')) fieldValue = fieldValue.slice(1);
      if (field === 'data') data.push(fieldValue);
      else if (field === 'id') id = fieldValue;
      else if (field === 'retry' && /^\d+$/.test(fieldValue)) retry = Number(fieldValue);
    }
  }
}

// Whether an agent takes a ticket, by the rule the desk's claims apply: a label naming an agent
// sends it there; else an agent with no labels takes unlabelled tickets, and one sharing a label a
// labelled one. The agents are read at most every ROUTES_FRESH_MS (a board with many todo cards
// asks once), so a new agent's labels show within that.
const ROUTES_FRESH_MS = 5000;
let routes = null;

/** Resolves to a function `takes(ticket)`; every ticket is taken while the agents cannot be read. */
export async function agentRouting() {
  if (!routes || Date.now() - routes.at > ROUTES_FRESH_MS) {
    routes = { at: Date.now(), agents: listAll('/v1/agents').catch(() => null) };
  }
  const agents = await routes.agents;
  return (ticket) => {
    if (!agents) return true;
    const labels = ticket.labels || [];
    if (agents.some((a) => labels.includes(a.name))) return true;
    return agents.some((a) => (labels.length === 0 ? a.labels.length === 0 : a.labels.some((l) => labels.includes(l))));
  };
}
