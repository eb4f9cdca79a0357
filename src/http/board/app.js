// The board's entry point: routes (#/, #/tickets/KEY, #/agents, #/schedules, #/experiments[/ID]), the token
// prompt, the stats strip
// and the live indicator.

import { api, listAll, token, project, onUnauthorized, ApiError } from './api.js';
import { h, fill, number, dollars, duration, toast, throttle } from './dom.js';
import { boardPage, COLUMNS } from './columns.js';
import { ticketPage } from './ticket.js';
import { agentsPage } from './agents.js';
import { schedulesPage } from './schedules.js';
import { experimentsPage, experimentPage } from './experiments.js';

const main = document.getElementById('main');
const statsEl = document.getElementById('stats');
const liveEl = document.getElementById('live');
const dialog = document.getElementById('token-dialog');
const tokenInput = document.getElementById('token-input');
const tokenError = document.getElementById('token-error');
const tokenButton = document.getElementById('token-button');
const projectSelect = document.getElementById('project');
const projectName = document.getElementById('project-name');

let page = null;

const app = {
  stats: null,
  setLive(state) {
    liveEl.dataset.state = state;
    liveEl.title = `Live updates: ${state}`;
  },
  refreshStats: throttle(loadStats, 1000),
};

async function loadStats() {
  try {
    app.stats = await api('GET', '/v1/stats');
  } catch {
    return;
  }
  const s = app.stats;
  fill(
    statsEl,
    COLUMNS.map(([status, title]) => h('span', { class: 'stat', dataset: { stat: status } }, h('i', { class: `dot dot-${status}`, 'aria-hidden': 'true' }), h('b', {}, String(s.by_status[status])), ` ${title.toLowerCase()}`)),
    h('span', { class: 'stat' }, h('b', {}, `${Math.round((s.success_rate || 0) * 100)}%`), ' success'),
    h('span', { class: 'stat' }, h('b', {}, number(s.requests)), ' requests'),
    h('span', { class: 'stat' }, h('b', {}, `${number(s.input_tokens)}/${number(s.output_tokens)}`), ' tokens in/out'),
    h('span', { class: 'stat', dataset: { stat: 'cost' } }, h('b', {}, dollars(s.cost_usd)), ' spent'),
    h('span', { class: 'stat' }, h('b', {}, duration(s.avg_ticket_ms)), ' per ticket')
  );
  if (page && page.statsChanged) page.statsChanged();
}

function route() {
  if (page) page.close();
  page = null;
  document.title = 'agentdesk';
  const hash = location.hash.replace(/^#/, '') || '/';
  const ticket = hash.match(/^\/tickets\/([^/]+)$/);
  let current = 'board';
  if (ticket) {
    current = 'ticket';
    page = ticketPage(main, app, decodeURIComponent(ticket[1]));
  } else if (hash.match(/^\/experiments\/([^/]+)$/)) {
    current = 'experiments';
    page = experimentPage(main, app, decodeURIComponent(hash.split('/')[2]));
  } else if (hash === '/experiments') {
    current = 'experiments';
    page = experimentsPage(main, app);
  } else if (hash === '/schedules') {
    current = 'schedules';
    page = schedulesPage(main, app);
  } else if (hash === '/agents') {
    current = 'agents';
    page = agentsPage(main, app);
  } else {
    page = boardPage(main, app);
  }
  for (const a of document.querySelectorAll('[data-nav]')) {
    if (a.dataset.nav === current) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
  loadStats();
}

// A desk token picks the project it acts in; a project token (whose list holds only its own
// project) is shown its project's name.
async function loadProjects() {
  let projects = [];
  try {
    projects = await listAll('/v1/projects');
  } catch {
    // 401 is the token prompt's; anything else leaves the board in its project.
  }
  if (projects.length < 2) {
    if (project.get()) project.set('');
    // Any answer names the project it acted in.
    await api('GET', '/v1/stats').catch(() => {});
    projectSelect.parentElement.hidden = true;
    projectName.hidden = !project.acting || project.acting === 'default';
    projectName.textContent = project.acting;
    return;
  }
  if (!projects.some((p) => p.name === project.get())) project.set('');
  fill(projectSelect, projects.map((p) => h('option', { value: p.name }, p.name)));
  projectSelect.value = project.get() || 'default';
  projectSelect.parentElement.hidden = false;
  projectName.hidden = true;
}

projectSelect.addEventListener('change', () => {
  project.set(projectSelect.value === 'default' ? '' : projectSelect.value);
  // The board, not another project's ticket.
  if (location.hash.startsWith('#/tickets/')) location.hash = '#/';
  else route();
});

function askForToken(message) {
  tokenButton.hidden = false;
  tokenError.textContent = message || '';
  if (!dialog.open) {
    tokenInput.value = '';
    dialog.showModal();
  }
  tokenInput.focus();
}

onUnauthorized(() => askForToken(token.get() ? 'That token was refused.' : ''));

document.getElementById('token-form').addEventListener('submit', async (event) => {
  event.preventDefault();
  const candidate = tokenInput.value.trim();
  if (!candidate) return;
  const previous = token.get();
  token.set(candidate);
  try {
    await api('GET', '/v1/stats');
  } catch (e) {
    if (e instanceof ApiError && e.status === 401) {
      if (previous) token.set(previous);
      else token.clear();
      tokenError.textContent = 'That token was refused.';
      return;
    }
  }
  dialog.close();
  toast('Token saved in this browser');
  await loadProjects();
  route();
});

document.getElementById('token-forget').addEventListener('click', () => {
  token.clear();
  tokenInput.value = '';
  tokenError.textContent = 'Forgotten.';
});

tokenButton.addEventListener('click', () => askForToken(''));
if (token.get()) tokenButton.hidden = false;

window.addEventListener('board-error', (event) => toast(`Error: ${event.detail}`, 'error'));
window.addEventListener('hashchange', route);
// Stats stay fresh while nothing happens on the page's stream.
setInterval(() => app.refreshStats(), 15000);
loadProjects().finally(route);
