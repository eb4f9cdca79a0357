// The schedules page: every schedule with its next run and last ticket; pause/resume and run now.

import { api, listAll, ApiError } from './api.js';
import { h, fill, asText, shorten, toast, utc } from './dom.js';

export function schedulesPage(main) {
  const table = h('tbody');
  fill(
    main,
    h('div', { class: 'page-head' }, h('h1', {}, 'Schedules')),
    h(
      'table',
      { class: 'agents schedules' },
      h('thead', {}, h('tr', {}, ['Schedule', 'Cron', 'Time zone', 'Task', 'Next run', 'Last ticket', ''].map((c) => h('th', { scope: 'col' }, c)))),
      table
    )
  );
  load();
  // Next runs move on by themselves: keep the page fresh.
  const timer = setInterval(load, 10000);

  async function load() {
    try {
      const schedules = await listAll('/v1/schedules');
      fill(table, schedules.map(row));
      if (!schedules.length) fill(table, h('tr', {}, h('td', { colspan: 7 }, 'No schedules yet (POST /v1/schedules, or `agentdesk schedule create`).')));
    } catch (e) {
      if (!(e instanceof ApiError && e.status === 401)) toast(`Could not load the schedules: ${e.message}`, 'error');
    }
  }

  function row(s) {
    const ref = s.name || s.id;
    const path = `/v1/schedules/${encodeURIComponent(ref)}`;
    const act = (label, method, suffix, body, done) =>
      h('button', {
        type: 'button',
        class: 'quiet',
        dataset: { action: label.toLowerCase().replace(' ', '-') },
        onclick: async () => {
          try {
            const answer = await api(method, path + suffix, body);
            toast(done(answer));
            load();
          } catch (e) {
            toast(e.message, 'error');
          }
        },
      }, label);
    const toggle = s.enabled
      ? act('Pause', 'PATCH', '', { enabled: false }, () => `Paused ${ref}`)
      : act('Resume', 'PATCH', '', { enabled: true }, () => `Resumed ${ref}`);
    const run = act('Run now', 'POST', '/run', {}, (t) => `Created ${t.key}`);
    const last = s.last_ticket ? h('a', { href: `#/tickets/${encodeURIComponent(s.last_ticket)}` }, s.last_ticket) : '—';
    return h(
      'tr',
      { dataset: { schedule: ref } },
      h('th', { scope: 'row' }, ref),
      h('td', { class: 'mono' }, s.cron),
      h('td', {}, s.timezone),
      h('td', {}, shorten(asText(s.ticket.task), 80)),
      h('td', { dataset: { next: '' } }, s.enabled ? (s.next_run_at ? h('time', { datetime: s.next_run_at, title: new Date(s.next_run_at).toLocaleString() }, utc(s.next_run_at)) : 'never again') : 'paused'),
      h('td', {}, last),
      h('td', {}, toggle, ' ', run)
    );
  }

  return {
    close() {
      clearInterval(timer);
    },
  };
}
