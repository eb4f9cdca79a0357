// Small DOM helpers: elements from plain values (text is always set as text, never as HTML).

/** An element: `h('a', {href, class, onclick}, child, …)`; children may be nodes, text or arrays. */
export function h(tag, props, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(props || {})) {
    if (value == null || value === false) continue;
    if (name === 'class') el.className = value;
    else if (name === 'dataset') Object.assign(el.dataset, value);
    else if (name.startsWith('on')) el.addEventListener(name.slice(2), value);
    else if (name === 'value' || name === 'checked') el[name] = value;
    else el.setAttribute(name, value === true ? '' : String(value));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child == null || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
}

/** Replaces an element's children. */
export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

/** A task or result as text: strings as they are, anything else as indented JSON. */
export function asText(value) {
  if (value == null) return '';
  return typeof value === 'string' ? value : JSON.stringify(value, null, 2);
}

export function shorten(text, max) {
  return text.length > max ? text.slice(0, max - 1) + '…' : text;
}

/** "3 min ago" for recent times, the date otherwise. */
export function ago(iso) {
  if (!iso) return '';
  const seconds = (Date.now() - Date.parse(iso)) / 1000;
  if (seconds < 60) return 'just now';
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ago`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)} h ago`;
  return new Date(iso).toLocaleDateString();
}

export function number(n) {
  if (n == null) return '–';
  if (n >= 1e6) return (n / 1e6).toFixed(1) + 'M';
  if (n >= 1e4) return Math.round(n / 1e3) + 'k';
  if (n >= 1e3) return (n / 1e3).toFixed(1) + 'k';
  return String(n);
}

// US dollars as the desk reports them (exact amounts, shown to a few significant digits).
export function dollars(n) {
  if (n == null) return '–';
  if (n === 0) return '$0';
  if (n >= 1) return '$' + n.toFixed(2);
  return '$' + Number(n.toPrecision(3));
}

export function duration(ms) {
  if (!ms) return '–';
  if (ms < 1000) return Math.round(ms) + ' ms';
  if (ms < 60000) return (ms / 1000).toFixed(1) + ' s';
  return (ms / 60000).toFixed(1) + ' min';
}

let toastTimer = null;
/** A short message at the bottom of the page (announced to screen readers). */
export function toast(message, kind = 'info') {
  const el = document.getElementById('toast');
  el.textContent = message;
  el.dataset.kind = kind;
  el.classList.add('shown');
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => el.classList.remove('shown'), kind === 'error' ? 8000 : 3000);
}

/** A comma-separated input as a list. */
export function commaList(text) {
  return text
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
}

/** Calls `f` at most once per `ms`, the last call winning. */
export function throttle(f, ms) {
  let timer = null;
  let last = 0;
  return () => {
    if (timer) return;
    const wait = Math.max(0, last + ms - Date.now());
    timer = setTimeout(() => {
      timer = null;
      last = Date.now();
      f();
    }, wait);
  };
}

/** `n thing` or `n things`. */
export function count(n, thing) {
  const k = n || 0;
  return `${number(k)} ${thing}${k === 1 ? '' : 's'}`;
}

/** A time as `2026-11-29 08:00 UTC`: one zone for everyone reading the page. */
export function utc(iso) {
  const d = new Date(iso);
  return Number.isNaN(d.getTime()) ? String(iso) : `${d.toISOString().slice(0, 16).replace('T', ' ')} UTC`;
}
