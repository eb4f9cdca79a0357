// A ticket's page: its state and usage, the transcript, the model's text and thinking as they
// stream, the actions (cancel, retry, comment, approve/deny), and its event log.

import { api, agentRouting, follow, listAll, ApiError } from './api.js';
import { h, fill, asText, ago, count, number, dollars, toast, throttle } from './dom.js';

const ACTIVE = new Set(['todo', 'in_progress', 'waiting']);
const FAILED_OR_CANCELLED = new Set(['failed', 'cancelled']);
const FINAL = new Set(['ticket.done', 'ticket.failed', 'ticket.cancelled']);

export function ticketPage(main, app, reference) {
  let ticket = null;
  let closed = false;
  let lastKind = null; // of the latest stored event seen
  const comments = new Map(); // seq → comment
  const live = { text: '', thinking: '', calls: new Map() };
  let takes = () => true; // whether an agent takes a ticket (api.js's agentRouting)

  const head = h('div', { class: 'ticket-head' });
  // Built once and shown or hidden: refreshes leave them (and the keyboard focus) in place.
  const cancelButton = h('button', { type: 'button', id: 'cancel', class: 'danger', hidden: true, onclick: () => act('cancel') }, 'Cancel');
  const retryButton = h('button', { type: 'button', id: 'retry', hidden: true, onclick: () => act('retry') }, 'Retry');
  const actions = h('div', { class: 'actions' }, cancelButton, retryButton);
  const headText = h('div');
  head.append(headText, actions);
  const body = h('div', { class: 'ticket-body' });
  const approvals = h('div', { class: 'approvals', 'aria-live': 'polite' });
  const transcript = h('ol', { class: 'transcript', 'aria-label': 'Transcript' });
  const liveBox = h('section', { class: 'live-box', id: 'live-output', 'aria-label': 'Streaming', 'aria-live': 'off', hidden: true });
  const events = h('ol', { class: 'events' });
  const commentForm = commentBox();
  fill(
    main,
    h('p', {}, h('a', { href: '#/' }, '← Board')),
    head,
    body,
    approvals,
    h('h2', {}, 'Transcript'),
    transcript,
    liveBox,
    commentForm,
    h('details', { class: 'event-log' }, h('summary', {}, 'Events'), events)
  );

  let stream = null;
  start();

  async function start() {
    try {
      ticket = await api('GET', `/v1/tickets/${encodeURIComponent(reference)}`);
    } catch (e) {
      fill(headText, h('h1', {}, reference), h('p', { class: 'error' }, e instanceof ApiError ? e.message : String(e)));
      return;
    }
    if (closed) return;
    document.title = `${ticket.key} · agentdesk`;
    takes = await agentRouting();
    renderTicket();
    try {
      for (const c of await listAll(`/v1/tickets/${ticket.id}/comments`, 10000)) comments.set(c.seq, c);
    } catch (e) {
      toast(`Could not load the transcript: ${e.message}`, 'error');
    }
    if (closed) return;
    renderTranscript();
    stream = follow(`/v1/tickets/${ticket.id}/events`, {
      onEvent,
      onState: (s) => app.setLive(s === 'ended' ? 'idle' : s),
      // The server ends a ticket's stream after its final event, and when it shuts down.
      isDone: () => FINAL.has(lastKind),
    });
  }

  const refresh = throttle(async () => {
    try {
      takes = await agentRouting();
      const fresh = await api('GET', `/v1/tickets/${ticket.id}`);
      if (!closed) {
        ticket = fresh;
        renderTicket();
      }
    } catch {
      // The next event refreshes again.
    }
  }, 300);

  function onEvent(event) {
    const data = event.data || {};
    switch (event.kind) {
      case 'text.delta':
        live.text += data.delta;
        break;
      case 'thinking.delta':
        live.thinking += data.delta;
        break;
      case 'tool_call.delta': {
        const call = live.calls.get(data.call_id) || { name: data.tool_name, args: '' };
        call.args += data.delta;
        live.calls.set(data.call_id, call);
        break;
      }
      // Not on request.started: stored events can reach the page after the first live deltas of
      // their request. A failed request's partial text goes; a retry streams anew after its delay.
      case 'request.retried':
      case 'request.failed':
      case 'ticket.cancelled':
      case 'ticket.failed':
      case 'ticket.requeued':
        clearLive();
        break;
      case 'comment.created':
        if (!comments.has(data.comment.seq)) {
          comments.set(data.comment.seq, data.comment);
          // The assistant's message now holds what was streaming.
          if (data.comment.author === 'assistant') clearLive();
          renderTranscript();
        }
        break;
      default:
        break;
    }
    if (event.seq != null) {
      lastKind = event.kind;
      logEvent(event);
      if (event.kind.startsWith('ticket.') || event.kind.startsWith('request.') || event.kind.startsWith('tool.')) refresh();
    }
    if (event.kind.endsWith('.delta')) renderLive();
  }

  function clearLive() {
    live.text = '';
    live.thinking = '';
    live.calls.clear();
    renderLive();
  }

  const renderLive = throttle(() => {
    const empty = !live.text && !live.thinking && live.calls.size === 0;
    liveBox.hidden = empty;
    if (empty) return liveBox.replaceChildren();
    fill(
      liveBox,
      h('h3', {}, h('span', { class: 'pulse', 'aria-hidden': 'true' }), ` ${ticket.agent || 'The agent'} is writing…`),
      live.thinking ? h('details', { class: 'thinking', open: true }, h('summary', {}, 'Thinking'), h('pre', { id: 'live-thinking' }, live.thinking)) : null,
      live.text ? h('div', { class: 'text', id: 'live-text' }, live.text) : null,
      [...live.calls].map(([id, c]) => h('div', { class: 'tool-call' }, h('strong', {}, c.name), ' ', h('code', {}, id), h('pre', {}, c.args)))
    );
  }, 50);

  function renderTicket() {
    const t = ticket;
    cancelButton.hidden = !ACTIVE.has(t.status);
    retryButton.hidden = !FAILED_OR_CANCELLED.has(t.status);
    fill(
      headText,
      h('h1', {}, t.key, ' ', h('span', { class: `status status-${t.status}`, id: 'ticket-status' }, t.status.replace('_', ' '))),
      h(
        'p',
        { class: 'meta' },
        t.agent ? h('span', {}, `agent @${t.agent}`) : t.status === 'todo' && !takes(t) ? h('span', { class: 'unrouted', id: 'ticket-unrouted' }, 'no agent takes its labels: it waits until an agent\'s labels (or name) match') : h('span', {}, 'not claimed yet'),
        h('span', {}, `priority ${t.priority}`),
        h('span', {}, `attempts ${t.attempts}/${t.max_attempts}`),
        h('span', {}, `by ${t.reporter}`),
        h('span', { title: t.created_at }, `created ${ago(t.created_at)}`),
        t.parent_key ? h('a', { href: `#/tickets/${t.parent_key}` }, `parent ${t.parent_key}`) : null,
        (t.labels || []).map((l) => h('span', { class: 'chip' }, l))
      )
    );
    const u = t.usage || {};
    fill(
      body,
      h('h2', {}, 'Task'),
      h('pre', { class: 'task' }, asText(t.task)),
      t.schema ? h('details', {}, h('summary', {}, 'Result schema'), h('pre', {}, asText(t.schema))) : null,
      t.result != null ? [h('h2', {}, 'Result'), h('pre', { class: 'result', id: 'ticket-result' }, asText(t.result))] : null,
      t.error ? h('p', { class: 'error' }, h('strong', {}, t.error.kind), ': ', t.error.message) : null,
      h(
        'p',
        { class: 'usage', id: 'ticket-usage' },
        `${number(u.input_tokens)} input tokens · ${number(u.output_tokens)} output tokens`,
        u.cache_read_tokens ? ` · ${number(u.cache_read_tokens)} cached` : '',
        ` · ${count(u.requests, 'request')} · ${count(u.tool_calls, 'tool call')}`,
        u.estimated ? ' (estimated)' : '',
        h('span', { id: 'ticket-cost' }, u.unpriced ? ' · cost unknown (a model has no price)' : ` · ${dollars(u.cost_usd)}`),
        t.budget_usd != null ? ` of a ${dollars(t.budget_usd)} budget` : ''
      ),
      t.waiting_for === 'budget' || t.waiting_for === 'price'
        ? h('p', { class: 'error', id: 'ticket-waiting-for' },
            t.waiting_for === 'budget'
              ? 'Waiting for a money budget: raise it (the ticket\'s budget_usd, or its agent\'s budget_usd_per_day) or wait for the next UTC day.'
              : 'Waiting for a price: its model has none and a money budget applies (PUT /v1/prices/{model}).')
        : null
    );
    renderApprovals();
  }

  // What waits for a person: the agent's question, and calls that wait for approval, each with
  // its deadline.
  function renderApprovals() {
    const pending = ticket.pending_approvals || [];
    const question = ticket.pending_question;
    if (!pending.length && !question) return approvals.replaceChildren();
    fill(
      approvals,
      question ? questionView(question) : null,
      pending.length ? h('h2', {}, 'Waiting for approval') : null,
      pending.map((p) => {
        const reason = h('input', { 'aria-label': `Reason for ${p.call_id}`, placeholder: 'reason (optional)' });
        const decide = async (approve) => {
          const body = { approve };
          if (reason.value.trim()) body.reason = reason.value.trim();
          try {
            await api('POST', `/v1/tickets/${ticket.id}/approvals/${encodeURIComponent(p.call_id)}`, body);
            toast(approve ? `Approved ${p.tool_name}` : `Denied ${p.tool_name}`);
            refresh();
          } catch (e) {
            toast(e.message, 'error');
          }
        };
        return h(
          'div',
          { class: 'approval', dataset: { callId: p.call_id } },
          h('p', {}, h('strong', {}, p.tool_name), ' ', h('code', {}, p.call_id)),
          deadline(p.expires_at),
          h('pre', {}, asText(p.input)),
          h('div', { class: 'actions' }, reason, h('button', { type: 'button', onclick: () => decide(true) }, 'Approve'), h('button', { type: 'button', class: 'danger', onclick: () => decide(false) }, 'Deny'))
        );
      })
    );
  }

  function deadline(at) {
    return at ? h('p', { class: 'deadline', title: at }, `Answer by ${new Date(at).toLocaleString()}`) : null;
  }

  function questionView(q) {
    const send = async (answer) => {
      try {
        await api('POST', `/v1/tickets/${ticket.id}/questions/${q.id}`, { answer });
        toast('Answer sent');
        refresh();
      } catch (e) {
        toast(e.message, 'error');
      }
    };
    // A schema that wants anything but text is answered as JSON.
    const asJson = q.response_schema && q.response_schema.type !== 'string';
    const box = h('textarea', { 'aria-label': 'Your answer', rows: 3, placeholder: asJson ? 'the answer, as JSON' : 'your answer' });
    const submit = () => {
      if (!asJson) return send(box.value.trim());
      try {
        send(JSON.parse(box.value));
      } catch (e) {
        toast(`Not JSON: ${e.message}`, 'error');
      }
    };
    return h(
      'div',
      { class: 'question', id: 'pending-question', dataset: { questionId: q.id } },
      h('h2', {}, 'Question for you'),
      h('p', { class: 'question-text' }, q.question),
      deadline(q.expires_at),
      q.response_schema ? h('details', {}, h('summary', {}, 'Answer schema'), h('pre', {}, asText(q.response_schema))) : null,
      q.choices
        ? h('div', { class: 'actions' }, q.choices.map((c) => h('button', { type: 'button', onclick: () => send(c) }, c)))
        : h('div', { class: 'actions' }, box, h('button', { type: 'button', onclick: submit }, 'Answer'))
    );
  }

  function renderTranscript() {
    const ordered = [...comments.values()].sort((a, b) => a.seq - b.seq);
    fill(transcript, ordered.map(commentView));
  }

  function commentView(c) {
    return h(
      'li',
      { class: `comment by-${c.author}`, dataset: { seq: c.seq } },
      h('p', { class: 'who' }, who(c), h('span', { class: 'when', title: c.created_at }, ago(c.created_at))),
      c.content.map(block)
    );
  }

  // Tool results travel as the user's turn; on the page they are what they are.
  function who(c) {
    if (c.author === 'assistant' && c.agent) return `assistant @${c.agent}`;
    if (c.author === 'user' && c.content.length && c.content.every((b) => b.type === 'tool_result')) return 'tool results';
    return c.author;
  }

  function block(b) {
    switch (b.type) {
      case 'text':
        return h('div', { class: 'text' }, b.text);
      case 'thinking':
        return h('details', { class: 'thinking' }, h('summary', {}, 'Thinking'), h('pre', {}, b.text));
      case 'tool_use':
        return h('div', { class: 'tool-call' }, h('p', {}, '→ ', h('strong', {}, b.name), ' ', h('code', {}, b.id)), h('pre', {}, asText(b.input)));
      case 'tool_result':
        return h(
          'div',
          { class: `tool-result${b.is_error ? ' is-error' : ''}` },
          h('p', {}, b.is_error ? '✗ error from ' : '← output of ', h('code', {}, b.tool_use_id)),
          h('pre', {}, b.output)
        );
      default:
        return h('pre', {}, asText(b));
    }
  }

  function logEvent(event) {
    events.append(h('li', {}, h('code', {}, `#${event.seq}`), ' ', h('strong', {}, event.kind), ' ', h('span', { class: 'when' }, new Date(event.at).toLocaleTimeString()), ' ', h('span', { class: 'data' }, summary(event))));
  }

  function summary(event) {
    const d = event.data || {};
    if (event.kind === 'comment.created') return d.comment.author;
    if (d.ticket) return '';
    const text = JSON.stringify(d);
    return text === '{}' ? '' : text.length > 160 ? text.slice(0, 159) + '…' : text;
  }

  async function act(action) {
    try {
      ticket = await api('POST', `/v1/tickets/${ticket.id}/${action}`);
      renderTicket();
      toast(action === 'cancel' ? `Cancelled ${ticket.key}` : `${ticket.key} is queued again`);
      if (stream) stream.resume();
    } catch (e) {
      toast(e.message, 'error');
    }
  }

  function commentBox() {
    const text = h('textarea', { id: 'comment-text', rows: 3, required: true, placeholder: 'Reply to the agent, or add to the task' });
    const send = h('button', { type: 'submit', id: 'comment-send' }, 'Comment');
    const form = h(
      'form',
      {
        class: 'comment-form',
        onsubmit: async (event) => {
          event.preventDefault();
          if (!text.value.trim()) return;
          send.disabled = true;
          try {
            const c = await api('POST', `/v1/tickets/${ticket.id}/comments`, { text: text.value });
            comments.set(c.seq, c);
            renderTranscript();
            text.value = '';
            refresh();
            // A finished ticket is reopened: follow it again.
            if (stream) stream.resume();
          } catch (e) {
            toast(e.message, 'error');
          } finally {
            send.disabled = false;
          }
        },
      },
      h('label', { for: 'comment-text' }, 'Comment'),
      text,
      h('div', { class: 'actions' }, send)
    );
    text.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) form.requestSubmit();
    });
    return form;
  }

  return {
    close() {
      closed = true;
      if (stream) stream.close();
    },
  };
}
