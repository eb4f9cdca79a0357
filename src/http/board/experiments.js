// The experiments pages: the list (#/experiments) and one experiment side by side
// (#/experiments/ID): each arm's figures, then each ticket's results by arm.

import { api, ApiError } from './api.js';
import { h, fill, asText, shorten, toast, number, dollars, duration } from './dom.js';

// An experiment's status in the colours of a ticket's.
function experimentColour(status) {
  return status === 'running' ? 'in_progress' : status;
}

export function experimentsPage(main) {
  const table = h('tbody');
  fill(
    main,
    h('div', { class: 'page-head' }, h('h1', {}, 'Experiments')),
    h(
      'table',
      { class: 'agents experiments' },
      h('thead', {}, h('tr', {}, ['Experiment', 'Status', 'Arms', 'Tickets', 'Cost', 'Started'].map((c) => h('th', { scope: 'col' }, c)))),
      table
    )
  );
  load();
  const timer = setInterval(load, 5000);

  async function load() {
    try {
      const { items } = await api('GET', '/v1/experiments');
      fill(table, items.map(row));
      if (!items.length) fill(table, h('tr', {}, h('td', { colspan: 6 }, 'No experiments yet (POST /v1/experiments, or `agentdesk experiment create`).')));
    } catch (e) {
      if (!(e instanceof ApiError && e.status === 401)) toast(`Could not load the experiments: ${e.message}`, 'error');
    }
  }

  function row(x) {
    return h(
      'tr',
      { dataset: { experiment: x.id } },
      h('th', { scope: 'row' }, h('a', { href: `#/experiments/${x.id}` }, x.name)),
      h('td', {}, h('span', { class: `status status-${experimentColour(x.status)}` }, x.status)),
      h('td', {}, x.arms.map((a) => a.name).join(' · ')),
      h('td', {}, String(x.tickets.length)),
      h('td', {}, dollars(x.cost_usd)),
      h('td', { title: x.created_at }, new Date(x.created_at).toLocaleString())
    );
  }

  return {
    close() {
      clearInterval(timer);
    },
  };
}

export function experimentPage(main, _app, id) {
  const head = h('div', { class: 'page-head' });
  const figures = h('tbody');
  const figuresHead = h('thead');
  const results = h('div', { class: 'side-by-side' });
  fill(
    main,
    h('p', {}, h('a', { href: '#/experiments' }, '← Experiments')),
    head,
    h('table', { class: 'agents arms', id: 'experiment-arms' }, figuresHead, figures),
    h('h2', {}, 'Results side by side'),
    results
  );
  let timer = null;
  load();

  async function load() {
    let x;
    try {
      x = await api('GET', `/v1/experiments/${encodeURIComponent(id)}`);
    } catch (e) {
      fill(head, h('h1', {}, 'Experiment'), h('p', { class: 'error' }, e.message));
      return;
    }
    document.title = `${x.name} · agentdesk`;
    const cancel = x.status === 'running'
      ? h('button', { type: 'button', class: 'danger', id: 'cancel-experiment', onclick: async () => {
          try {
            await api('POST', `/v1/experiments/${x.id}/cancel`, {});
            toast(`Cancelled ${x.name}`);
            load();
          } catch (e) {
            toast(e.message, 'error');
          }
        } }, 'Cancel')
      : null;
    fill(
      head,
      h('h1', {}, x.name, ' ', h('span', { class: `status status-${experimentColour(x.status)}`, id: 'experiment-status' }, x.status)),
      h('p', {}, `${x.tickets.length} tickets × ${x.arms.length} arms · tools ${x.tools} · ${dollars(x.cost_usd)} so far`, x.judge ? ` · judged by @${x.judge.agent}` : ''),
      cancel
    );
    const judged = x.arms.some((a) => a.judge);
    fill(
      figuresHead,
      h('tr', {}, ['Arm', 'Done', 'Failed', 'Waiting', 'Cost', 'Tokens in/out', 'p50', 'p95', 'Schema valid', ...(judged ? ['Wins', 'Losses', 'Ties', 'Mean score'] : [])].map((c) => h('th', { scope: 'col' }, c)))
    );
    fill(
      figures,
      x.arms.map((a) =>
        h(
          'tr',
          { dataset: { arm: a.name } },
          h('th', { scope: 'row' }, a.name, h('div', { class: 'muted' }, [a.agent && `@${a.agent}`, a.agent_version && `v${a.agent_version}`, a.provider, a.model].filter(Boolean).join(' '))),
          h('td', {}, String(a.done)),
          h('td', {}, String(a.failed)),
          h('td', {}, String(a.waiting)),
          h('td', {}, dollars(a.cost_usd)),
          h('td', {}, `${number(a.input_tokens)}/${number(a.output_tokens)}`),
          h('td', {}, a.duration_ms.p50 == null ? '—' : duration(a.duration_ms.p50)),
          h('td', {}, a.duration_ms.p95 == null ? '—' : duration(a.duration_ms.p95)),
          h('td', {}, a.schema_valid == null ? '—' : `${Math.round(a.schema_valid * 100)}%`),
          ...(judged && a.judge
            ? [String(a.judge.wins), String(a.judge.losses), String(a.judge.ties), a.judge.mean_score == null ? '—' : a.judge.mean_score.toFixed(1)].map((v) => h('td', {}, v))
            : [])
        )
      )
    );
    const arms = x.arms.map((a) => a.name);
    fill(
      results,
      h(
        'table',
        { class: 'agents results' },
        h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, 'Ticket'), arms.map((a) => h('th', { scope: 'col' }, a)))),
        h(
          'tbody',
          {},
          x.tickets.map((t) =>
            h(
              'tr',
              { dataset: { ticket: t.ticket } },
              h('th', { scope: 'row' }, h('a', { href: `#/tickets/${encodeURIComponent(t.ticket)}` }, t.ticket)),
              arms.map((a) => {
                const r = t.results[a];
                if (!r) return h('td', {}, '—');
                return h(
                  'td',
                  { dataset: { arm: a } },
                  h('a', { href: `#/tickets/${encodeURIComponent(r.key)}` }, r.key), ' ',
                  h('span', { class: `status status-${r.status}` }, r.status.replace('_', ' ')),
                  r.result != null ? h('pre', { class: 'result' }, shorten(asText(r.result), 600)) : null
                );
              })
            )
          )
        )
      )
    );
    clearTimeout(timer);
    if (x.status === 'running') timer = setTimeout(load, 2000);
  }

  return {
    close() {
      clearTimeout(timer);
    },
  };
}
