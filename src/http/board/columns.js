// The board page: a column per status that moves live from /v1/events, the create form and filters.
// Columns load a page at a time (newest first) and render only what is shown, so a desk with
// thousands of tickets stays quick.

import { api, agentRouting, follow, query, ApiError } from './api.js';
import { h, fill, asText, shorten, ago, commaList, toast, throttle } from './dom.js';

export const COLUMNS = [
  ['todo', 'To do'],
  ['in_progress', 'In progress'],
  ['waiting', 'Waiting'],
  ['done', 'Done'],
  ['failed', 'Failed'],
  ['cancelled', 'Cancelled'],
];
const PAGE = 50;

/** The status an event leaves its ticket in, for the kinds that change it. */
const STATUS_AFTER = {
  'ticket.started': 'in_progress',
  'ticket.done': 'done',
  'ticket.failed': 'failed',
  'ticket.cancelled': 'cancelled',
  'ticket.waiting': 'waiting',
  'ticket.requeued': 'todo',
};

const keyNumber = (key) => Number(String(key).replace(/\D/g, '')) || 0;

export function boardPage(main, app) {
  const filters = { label: sessionStorage.getItem('board.label') || '', agent: sessionStorage.getItem('board.agent') || '' };
  const tickets = new Map(); // id → ticket (a stub with id, key and status until loaded)
  const columns = new Map(COLUMNS.map(([status]) => [status, { ids: [], cursor: undefined, shown: PAGE, loading: false }]));
  const dirty = new Set();
  const fetching = new Set();
  let stream = null;
  let generation = 0;

  const columnEls = new Map();
  const board = h(
    'div',
    { class: 'columns' },
    COLUMNS.map(([status, title]) => {
      const list = h('ol', { class: 'cards', 'aria-label': title });
      const count = h('span', { class: 'count' });
      // One button for the column's life, shown while there is more: re-renders leave it (and its focus) alone.
      const more = h('div', { class: 'more', hidden: true }, h('button', { type: 'button', class: 'quiet', onclick: () => showMore(status) }, 'Show more'));
      const section = h('section', { class: 'column', dataset: { column: status }, 'aria-label': title }, h('h2', {}, title, ' ', count), list, more);
      columnEls.set(status, { list, count, more });
      return section;
    })
  );

  fill(main, createForm(), filterBar(), board);
  reload();

  function createForm() {
    const task = h('textarea', { id: 'new-task', name: 'task', rows: 3, required: true, placeholder: 'What should the agent do?' });
    const labels = h('input', { id: 'new-labels', name: 'labels', placeholder: 'comma-separated', title: 'An agent takes the tickets that carry one of its labels (or its name)' });
    const priority = h('input', { id: 'new-priority', name: 'priority', type: 'number', value: '0', step: '1' });
    const schema = h('textarea', { id: 'new-schema', name: 'schema', rows: 3, placeholder: '{"type": "object", "required": ["answer"]}' });
    const error = h('p', { class: 'error', role: 'alert' });
    const submit = h('button', { type: 'submit', id: 'new-submit' }, 'Create ticket');
    const form = h(
      'form',
      { class: 'create', id: 'create-form', onsubmit: onSubmit },
      h('div', { class: 'field grow' }, h('label', { for: 'new-task' }, 'Task'), task),
      h('div', { class: 'field' }, h('label', { for: 'new-labels' }, 'Labels'), labels),
      h('div', { class: 'field narrow' }, h('label', { for: 'new-priority' }, 'Priority'), priority),
      h('details', { class: 'field' }, h('summary', {}, 'Result schema (optional)'), h('label', { for: 'new-schema', class: 'hidden' }, 'Result schema (JSON)'), schema),
      h('div', { class: 'field end' }, submit),
      error
    );
    // Ctrl/Cmd+Enter in the task sends the form.
    task.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) form.requestSubmit();
    });

    async function onSubmit(event) {
      event.preventDefault();
      error.textContent = '';
      const body = { task: task.value.trim(), labels: commaList(labels.value), priority: Number(priority.value || 0) };
      if (schema.value.trim()) {
        try {
          body.schema = JSON.parse(schema.value);
        } catch (e) {
          error.textContent = `The schema is not JSON: ${e.message}`;
          schema.focus();
          return;
        }
      }
      submit.disabled = true;
      try {
        const ticket = await api('POST', '/v1/tickets', body);
        toast(`Created ${ticket.key}`);
        upsert(ticket);
        task.value = '';
        task.focus();
      } catch (e) {
        error.textContent = e instanceof ApiError ? e.message : String(e);
      } finally {
        submit.disabled = false;
      }
    }
    return h('section', { class: 'panel', 'aria-label': 'New ticket' }, form);
  }

  function filterBar() {
    const label = h('input', { id: 'filter-label', type: 'search', value: filters.label, placeholder: 'any label' });
    const agent = h('input', { id: 'filter-agent', type: 'search', value: filters.agent, placeholder: 'any agent', list: 'agent-names' });
    const names = h('datalist', { id: 'agent-names' });
    api('GET', '/v1/agents?limit=200')
      .then((page) => fill(names, page.items.map((a) => h('option', { value: a.name }))))
      .catch(() => {});
    const apply = () => {
      filters.label = label.value.trim();
      filters.agent = agent.value.trim();
      sessionStorage.setItem('board.label', filters.label);
      sessionStorage.setItem('board.agent', filters.agent);
      reload();
    };
    let timer = null;
    const later = () => {
      clearTimeout(timer);
      timer = setTimeout(apply, 300);
    };
    label.addEventListener('input', later);
    agent.addEventListener('input', later);
    return h(
      'div',
      { class: 'filters', role: 'search' },
      h('label', { for: 'filter-label' }, 'Label'),
      label,
      h('label', { for: 'filter-agent' }, 'Agent'),
      agent,
      names
    );
  }

  /** Loads the first page of every column and (re)opens the live stream with the filters. */
  function reload() {
    generation += 1;
    tickets.clear();
    for (const col of columns.values()) Object.assign(col, { ids: [], cursor: undefined, shown: PAGE });
    if (stream) stream.close();
    // Only ticket.* events: the board needs status changes, not every model delta.
    stream = follow(`/v1/events${query({ kind: 'ticket.*', label: filters.label, agent: filters.agent })}`, {
      onEvent,
      onState: (state) => app.setLive(state),
    });
    for (const status of columns.keys()) loadPage(status);
    refreshRouting();
  }

  // Which todo cards no agent will take; read again with each reload and every little while,
  // so that a card's warning goes once an agent takes its labels.
  let takes = () => true;
  function refreshRouting() {
    agentRouting().then((fresh) => {
      takes = fresh;
      dirty.add('todo');
      render();
    });
  }

  async function loadPage(status) {
    const col = columns.get(status);
    if (col.loading || col.cursor === null) return;
    col.loading = true;
    const mine = generation;
    try {
      const q = query({ status, label: filters.label, agent: filters.agent, order: 'desc', limit: PAGE, cursor: col.cursor });
      const page = await api('GET', `/v1/tickets${q}`);
      if (mine !== generation) return;
      col.cursor = page.next_cursor;
      for (const t of page.items) {
        const known = tickets.get(t.id);
        // A live event may already have moved it on; the newer state wins.
        if (known && known.updated_at && known.updated_at > t.updated_at) continue;
        upsert(t, true);
      }
    } catch (e) {
      if (!(e instanceof ApiError && e.status === 401)) toast(`Could not load the ${status} column: ${e.message}`, 'error');
    } finally {
      col.loading = false;
      dirty.add(status);
      render();
    }
  }

  /** Puts a ticket in its column (moving it from another one); `fromPage`: it came with a page. */
  function upsert(ticket, fromPage = false) {
    const old = tickets.get(ticket.id);
    const merged = old ? { ...old, ...ticket } : ticket;
    tickets.set(ticket.id, merged);
    if (old && old.status !== merged.status) {
      const from = columns.get(old.status);
      from.ids = from.ids.filter((id) => id !== ticket.id);
      dirty.add(old.status);
    }
    const col = columns.get(merged.status);
    if (!col.ids.includes(ticket.id)) {
      // Newest first, as the pages come.
      const n = keyNumber(merged.key);
      const at = col.ids.findIndex((id) => keyNumber(tickets.get(id).key) < n);
      if (at < 0) {
        // Older than everything loaded: it belongs to a page not loaded yet, unless all are.
        if (fromPage || !col.cursor) col.ids.push(ticket.id);
      } else col.ids.splice(at, 0, ticket.id);
    }
    dirty.add(merged.status);
    render();
  }

  function onEvent(event) {
    const known = tickets.get(event.ticket_id);
    const data = event.data || {};
    if (event.kind === 'ticket.created' || event.kind === 'ticket.updated') {
      upsert(data.ticket);
    } else if (STATUS_AFTER[event.kind]) {
      const change = { id: event.ticket_id, key: event.ticket_key, status: STATUS_AFTER[event.kind], updated_at: event.at };
      if (event.agent) change.agent = event.agent;
      if (event.kind === 'ticket.done') change.result = data.result;
      if (event.kind === 'ticket.failed') change.error = data.error;
      upsert(change);
      // Moved in from beyond the loaded pages: fetch what the card shows.
      if (!known) fetchTicket(event.ticket_id);
    }
    app.refreshStats();
  }

  function fetchTicket(id) {
    if (fetching.has(id)) return;
    fetching.add(id);
    const mine = generation;
    api('GET', `/v1/tickets/${id}`)
      .then((t) => {
        const current = tickets.get(id);
        if (mine === generation && (!current || !current.updated_at || current.updated_at <= t.updated_at)) upsert(t);
      })
      .catch(() => {})
      .finally(() => fetching.delete(id));
  }

  const render = throttle(() => {
    for (const status of dirty) renderColumn(status);
    dirty.clear();
  }, 50);

  function renderColumn(status) {
    const col = columns.get(status);
    const el = columnEls.get(status);
    // Every ticket of the column loaded: count them; else the stats know the total (without filters).
    const total = app.stats && !filters.label && !filters.agent ? app.stats.by_status[status] : null;
    el.count.textContent = !col.cursor ? String(col.ids.length) : total != null ? String(Math.max(total, col.ids.length)) : `${col.ids.length}+`;
    // Re-rendering must not drop the keyboard focus: it goes back to the same card or button.
    const active = document.activeElement;
    const focusedKey = el.list.contains(active) ? active.dataset.key : null;
    const moreFocused = el.more.contains(active);
    fill(el.list, col.ids.slice(0, col.shown).map((id) => card(tickets.get(id))));
    el.more.hidden = !(col.ids.length > col.shown || col.cursor);
    if (focusedKey) el.list.querySelector(`[data-key="${CSS.escape(focusedKey)}"]`)?.focus();
    else if (moreFocused && el.more.hidden) el.list.querySelector('li:last-child .card')?.focus();
  }

  function showMore(status) {
    const col = columns.get(status);
    col.shown += PAGE;
    if (col.ids.length < col.shown && col.cursor) loadPage(status);
    dirty.add(status);
    render();
  }

  function card(t) {
    const task = t.task === undefined ? '…' : shorten(asText(t.task), 160);
    return h(
      'li',
      {},
      h(
        'a',
        { class: 'card', href: `#/tickets/${t.key}`, dataset: { key: t.key, status: t.status } },
        h('span', { class: 'card-head' }, h('span', { class: 'key' }, t.key), t.priority ? h('span', { class: 'prio', title: 'priority' }, `P${t.priority}`) : null, h('span', { class: 'when' }, ago(t.created_at))),
        h('span', { class: 'task' }, task),
        h('span', { class: 'meta' }, (t.labels || []).map((l) => h('span', { class: 'chip' }, l)), t.agent ? h('span', { class: 'agent' }, `@${t.agent}`) : null),
        t.status === 'todo' && !takes(t) ? h('span', { class: 'unrouted', title: 'No agent takes its labels: it waits until an agent\'s labels (or name) match' }, 'no agent takes these labels') : null
      )
    );
  }

  return {
    /** Stats arrived: the column counts use them. */
    statsChanged() {
      for (const status of columns.keys()) dirty.add(status);
      render();
      refreshRouting();
    },
    close() {
      generation += 1;
      if (stream) stream.close();
    },
  };
}
