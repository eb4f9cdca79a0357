// The agents page: the list, and a form that creates an agent or edits one (PUT /v1/agents/{name}).

import { api, listAll, ApiError } from './api.js';
import { h, fill, commaList, toast } from './dom.js';

/** The fields with inputs of their own; everything else of an agent is edited as JSON. */
const MAIN_FIELDS = ['role', 'provider', 'model', 'labels', 'tools'];
const READ_ONLY = ['name', 'created_at', 'updated_at'];

export function agentsPage(main) {
  const table = h('tbody');
  const editor = h('section', { class: 'panel', id: 'agent-editor', 'aria-label': 'Agent' });
  fill(
    main,
    h('div', { class: 'page-head' }, h('h1', {}, 'Agents'), h('button', { type: 'button', id: 'new-agent', onclick: () => edit(null) }, 'New agent')),
    editor,
    h(
      'table',
      { class: 'agents' },
      h('thead', {}, h('tr', {}, ['Name', 'Provider', 'Model', 'Labels', 'Tools', ''].map((c) => h('th', { scope: 'col' }, c)))),
      table
    )
  );
  load();

  async function load() {
    try {
      const agents = await listAll('/v1/agents');
      fill(
        table,
        agents.map((a) =>
          h(
            'tr',
            { dataset: { agent: a.name } },
            h('th', { scope: 'row' }, a.name),
            h('td', {}, a.provider || 'default'),
            h('td', {}, a.model),
            h('td', {}, a.labels.map((l) => h('span', { class: 'chip' }, l))),
            h('td', {}, a.tools.join(', ')),
            h('td', {}, h('button', { type: 'button', class: 'quiet', onclick: () => edit(a) }, `Edit ${a.name}`))
          )
        )
      );
      if (!agents.length) fill(table, h('tr', {}, h('td', { colspan: 6 }, 'No agents yet.')));
    } catch (e) {
      if (!(e instanceof ApiError && e.status === 401)) toast(`Could not load the agents: ${e.message}`, 'error');
    }
  }

  function edit(agent) {
    const creating = agent === null;
    const a = agent || { role: '', provider: null, model: '', labels: [], tools: ['close_ticket', 'handover_ticket', 'read_tickets', 'manage_tickets'] };
    const rest = Object.fromEntries(Object.entries(a).filter(([k]) => !MAIN_FIELDS.includes(k) && !READ_ONLY.includes(k)));
    const name = h('input', { id: 'agent-name', required: true, value: creating ? '' : a.name, readonly: !creating });
    const role = h('textarea', { id: 'agent-role', rows: 4, value: a.role });
    const provider = h('input', { id: 'agent-provider', value: a.provider || '', placeholder: 'default' });
    const model = h('input', { id: 'agent-model', value: a.model || '', placeholder: 'default' });
    const labels = h('input', { id: 'agent-labels', value: a.labels.join(', ') });
    const tools = h('input', { id: 'agent-tools', value: a.tools.join(', ') });
    const more = h('textarea', { id: 'agent-more', rows: 6, class: 'mono', value: JSON.stringify(rest, null, 2) });
    const error = h('p', { class: 'error', role: 'alert' });
    const field = (id, label, input) => h('div', { class: 'field' }, h('label', { for: id }, label), input);
    const form = h(
      'form',
      {
        class: 'agent-form',
        onsubmit: async (event) => {
          event.preventDefault();
          error.textContent = '';
          let body;
          try {
            body = more.value.trim() ? JSON.parse(more.value) : {};
          } catch (e) {
            error.textContent = `Other settings are not JSON: ${e.message}`;
            return;
          }
          Object.assign(body, { role: role.value, labels: commaList(labels.value), tools: commaList(tools.value) });
          body.provider = provider.value.trim() || null;
          body.model = model.value.trim() || null;
          try {
            const saved = await api('PUT', `/v1/agents/${encodeURIComponent(name.value.trim())}`, body);
            toast(`Saved ${saved.name}`);
            editor.replaceChildren();
            load();
          } catch (e) {
            error.textContent = e.message;
          }
        },
      },
      h('h2', {}, creating ? 'New agent' : `Edit ${a.name}`),
      field('agent-name', 'Name', name),
      field('agent-role', 'Role (system prompt)', role),
      h('div', { class: 'row' }, field('agent-provider', 'Provider', provider), field('agent-model', 'Model', model)),
      field('agent-labels', 'Labels', labels),
      field('agent-tools', 'Tools', tools),
      field('agent-more', 'Other settings (JSON)', more),
      error,
      h('div', { class: 'actions' }, h('button', { type: 'submit', id: 'agent-save' }, 'Save'), h('button', { type: 'button', class: 'quiet', onclick: () => editor.replaceChildren() }, 'Close'))
    );
    fill(editor, form);
    (creating ? name : role).focus();
  }

  return { close() {} };
}
