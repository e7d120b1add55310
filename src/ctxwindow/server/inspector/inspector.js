// The session inspector (docs/inspector.md). The page holds no data: every session,
// message and report comes from the service's API with the user's key. Text from the API
// is only ever set as text (textContent, text nodes), never parsed as HTML.

const KEY = "ctxwindow.api-key"; // sessionStorage: this tab only
const API = new URL("../v1/", document.baseURI); // the page is /ui/, the API /v1/
const PAGE = 50; // sessions a page of the list
const ROWS = 100; // rows of the table a page
const STATES = ["pinned", "kept", "compressed", "recalled", "summarized", "evicted"];
const IN_CONTEXT = new Set(STATES.slice(0, 4));
const SVG = "http://www.w3.org/2000/svg";
const COLOURS = ["#1f5fa8", "#a34a00", "#2e7d32", "#7b3fa0", "#9c2a2a", "#00695c", "#5d4037"];
const number = new Intl.NumberFormat("en");

const $ = (id) => document.getElementById(id);
const state = {
  session: null, lastId: null, listing: 0, building: 0,
  after: 0, back: [], next: 0, filter: "", opened: null, // the table's page, its state filter
};

class NeedsKey extends Error {}

class APIError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

// --- building nodes: attributes and text only -------------------------------------------

function h(tag, attrs = {}, ...children) {
  return fill(document.createElement(tag), attrs, children);
}

function s(tag, attrs = {}, ...children) {
  return fill(document.createElementNS(SVG, tag), attrs, children);
}

function fill(node, attrs, children) {
  for (const [name, value] of Object.entries(attrs)) {
    if (value !== null && value !== undefined && value !== false) {
      node.setAttribute(name, value === true ? "" : String(value));
    }
  }
  node.append(...children.flat().filter((c) => c !== null && c !== undefined && c !== false));
  return node; // strings become text nodes: message text is never markup
}

// --- the API ------------------------------------------------------------------------------

async function api(path, params = {}) {
  const url = new URL(path, API);
  for (const [name, value] of Object.entries(params)) {
    if (value !== "" && value !== null && value !== undefined) url.searchParams.set(name, value);
  }
  const headers = { Accept: "application/json" };
  const key = sessionStorage.getItem(KEY);
  if (key) headers.Authorization = `Bearer ${key}`;
  const response = await fetch(url, { headers, cache: "no-store" });
  if (response.status === 401) {
    askForKey(key ? "The service refused this key: enter another one." : null);
    throw new NeedsKey("an API key is needed");
  }
  const body = await response.json().catch(() => null);
  if (!response.ok) {
    throw new APIError(response.status, body?.error?.message ?? `HTTP ${response.status}`);
  }
  return body;
}

function sessionPath(id, rest = "") {
  return `sessions/${encodeURIComponent(id)}${rest}`;
}

function say(id, text) {
  $(id).textContent = text;
}

function failed(where, error) {
  if (error instanceof NeedsKey) say(where, "An API key is needed: enter it in the form above.");
  else if (error instanceof APIError) {
    say(where, `The service answered ${error.status}: ${error.message}`);
  }
  else say(where, `Could not reach the service: ${error.message}`);
}

// --- the API key --------------------------------------------------------------------------

function askForKey(why) {
  const panel = $("key-panel");
  if (why) say("key-why", why);
  if (panel.hidden) {
    panel.hidden = false;
    $("api-key").focus();
  }
}

function useKey(event) {
  event.preventDefault();
  const key = $("api-key").value.trim();
  if (!key) return;
  sessionStorage.setItem(KEY, key);
  $("api-key").value = "";
  $("key-panel").hidden = true;
  $("forget-key").hidden = false;
  refresh();
}

function forgetKey() {
  sessionStorage.removeItem(KEY);
  $("forget-key").hidden = true;
  refresh();
}

function refresh() {
  loadSessions();
  if (state.session !== null) build();
}

// --- the sessions list --------------------------------------------------------------------

async function loadSessions(more = false) {
  const ask = ++state.listing; // a newer search wins over an answer still on its way
  const prefix = $("search").value;
  const params = { limit: PAGE, prefix, after: more ? state.lastId : null };
  say("sessions-status", "Loading sessions…");
  let page;
  try {
    page = await api("sessions", params);
  } catch (error) {
    if (ask === state.listing) failed("sessions-status", error);
    return;
  }
  if (ask !== state.listing) return;
  const list = $("sessions");
  if (!more) list.replaceChildren();
  list.append(...page.data.map(sessionItem));
  state.lastId = page.last_id ?? state.lastId;
  $("more").hidden = !page.has_more;
  const shown = list.children.length;
  const which = prefix ? ` whose id starts with “${prefix}”` : "";
  say("sessions-status", shown
    ? `${shown} session${shown === 1 ? "" : "s"}${which}${page.has_more ? ", more to load" : ""}.`
    : `No sessions${which}.`);
}

function sessionItem(session) {
  const meta = [plural(session.messages, "message")];
  if (session.updated_at) meta.push(`updated ${when(session.updated_at)}`);
  // With listed_ids "redacted" the id shown is redacted: the session opens by its handle.
  const key = session.ref ?? session.id;
  const link = h("a", { href: `#s=${encodeURIComponent(key)}`, "data-id": key },
    h("span", { class: "session-id" }, session.id),
    h("span", { class: "session-meta" }, meta.join(" · ")));
  if (key === state.session) link.setAttribute("aria-current", "true");
  return h("li", {}, link);
}

function plural(n, word) {
  return `${number.format(n)} ${word}${n === 1 ? "" : "s"}`;
}

function when(seconds) {
  const options = { dateStyle: "medium", timeStyle: "short" };
  return new Date(seconds * 1000).toLocaleString(undefined, options);
}

function markCurrent() {
  for (const link of $("sessions").querySelectorAll("a")) {
    if (link.dataset.id === state.session) link.setAttribute("aria-current", "true");
    else link.removeAttribute("aria-current");
  }
}

// --- one session --------------------------------------------------------------------------

function route(focus) {
  const found = /^#s=(.*)$/s.exec(location.hash);
  if (found) openSession(decodeURIComponent(found[1]), focus);
}

async function openSession(id, focus) {
  state.session = id;
  markCurrent();
  say("session-heading", `Session ${id}`);
  // empty: the route builds for the session's own model and budget, and the form shows them
  for (const field of ["model", "budget", "query", "from-seq"]) $(field).value = "";
  $("state-filter").value = "";
  Object.assign(state, { after: 0, back: [], filter: "", opened: null });
  await build();
  if (focus) $("session").focus();
}

async function build(event) {
  event?.preventDefault();
  const id = state.session;
  const ask = ++state.building;
  const { after, filter } = state;
  const params = {
    model: $("model").value.trim(),
    max_tokens: $("budget").value,
    query: $("query").value,
    limit: ROWS,
    after,
    state: filter,
  };
  say("session-status", "Building the context…");
  try {
    // the context first: a message stored in between then shows with no state, rather
    // than as a row of no stored message
    const context = await api(sessionPath(id, "/context"), params);
    // The page's stored messages, for their whole text. The rows of one state are no run
    // of the history: their text is read when a message is opened (messageCell).
    const entries = filter ? []
      : (await api(sessionPath(id, "/messages"), { after, limit: ROWS })).data;
    if (ask !== state.building) return;
    adopt(context);
    show(entries, context, after, filter);
    say("session-status", `The context for ${context.model} holds`
      + ` ${plural(context.messages.length, "message")},`
      + ` ${plural(context.total_tokens, "token")}.`);
  } catch (error) {
    if (ask !== state.building) return;
    clear(); // nothing stale: what is shown is what the service answered last
    $("session-body").hidden = !(error instanceof APIError && error.status === 400); // fix the form
    failed("session-status", error);
  }
}

// The model and the budget the context was built for go into the form's empty fields:
// the next page, or a rebuild, asks for the same.
function adopt(context) {
  if (!$("model").value.trim()) $("model").value = context.model;
  if (!$("budget").value) $("budget").value = String(context.report.budget);
  state.opened ??= { model: context.model, source: context.model_source };
}

function clear() {
  for (const id of ["summary", "by-category", "over-turns", "rows-status"]) {
    $(id).replaceChildren();
  }
  $("timeline").tBodies[0].replaceChildren();
  for (const id of ["first-page", "previous-page", "next-page"]) $(id).disabled = true;
}

function show(entries, context, after, filter) {
  const report = context.report;
  const items = timeline(entries, report.decisions ?? [], Boolean(filter));
  $("session-body").hidden = false;
  $("summary").replaceChildren(...summary(report, context));
  $("by-category").replaceChildren(categoryChart(report));
  $("over-turns").replaceChildren(turnsChart(items, report));
  const rows = items.map(itemRow);
  const end = items.findIndex((item) => item.row && item.row.id === context.stable_end);
  if (end !== -1) rows.splice(end + 1, 0, stableRow(report));
  else if (context.stable_end === null && !after && !filter && rows.length) {
    rows.unshift(stableRow(report));
  }
  $("timeline").tBodies[0].replaceChildren(...rows);
  pager(items, context, after, filter);
}

// The page's rows ({id, seq, role, category, priority, state, reason, tokens (in this
// context), stored_tokens, compressor, preview}; in the context's order: the system prompt,
// the summary, then by seq) with their stored messages. A stored message of no row was
// stored after the context was built: it ends the page, its state unknown.
function timeline(entries, rows, filtered) {
  const byId = new Map(entries.map((entry) => [entry.id, entry]));
  const items = rows.map((row) => ({ entry: byId.get(row.id) ?? null, row }));
  if (filtered) return items;
  const shown = new Set(rows.map((row) => row.id));
  const later = entries.filter((entry) => !shown.has(entry.id));
  return [...items, ...later.map((entry) => ({ entry, row: null }))];
}

function pager(items, context, after, filter) {
  const seqs = items.map(({ entry, row }) => entry?.seq ?? row?.seq)
    .filter((seq) => seq !== null && seq !== undefined);
  state.next = seqs.length ? Math.max(...seqs) : after;
  $("next-page").disabled = !context.has_more;
  $("previous-page").disabled = !after;
  $("first-page").disabled = !after;
  const counts = context.report.messages_by_state ?? {};
  const all = filter ? counts[filter] ?? 0 : Object.values(counts).reduce((a, b) => a + b, 0);
  const span = seqs.length ? `, seq ${Math.min(...seqs)}–${Math.max(...seqs)}` : "";
  const what = filter ? `${filter} messages` : "rows";
  say("rows-status", `${plural(items.length, "row")} on this page${span}, of`
    + ` ${number.format(all)} ${what} in all`
    + `${context.has_more ? "" : after ? " (the last page)" : ""}.`);
}

function turnPage(after, back) {
  Object.assign(state, { after, back });
  build();
}

function showRows(event) {
  event?.preventDefault();
  state.filter = $("state-filter").value;
  const from = Number.parseInt($("from-seq").value, 10);
  turnPage(from > 1 ? from - 1 : 0, []);
}

function stableRow(report) {
  const n = report.stable_messages ?? 0;
  const text = n
    ? `▲ stable prefix ends: the first ${n} messages of the context are sent again unchanged`
    : "No stable prefix: the window has just stepped, the whole context is new";
  return h("tr", { class: "stable-end" }, h("td", { colspan: 8 }, text));
}

function itemRow({ entry, row }) {
  const message = entry?.message ?? null;
  const status = row?.state ?? "unknown";
  const reasons = [row?.reason, row?.compressor && `by ${row.compressor}`,
    entry?.metadata?.unanswered && "unanswered: no reply stored"].filter(Boolean);
  const role = message?.role ?? row?.role ?? "";
  const seq = entry?.seq ?? row?.seq ?? null;
  return h("tr", { class: `state-${status.replace(/[^a-z]/g, "")}`, "data-id": entry?.id ?? row.id,
    "data-state": status },
    h("td", { class: "num" }, seq === null ? "—" : String(seq)),
    h("td", {}, message?.name ? `${role} (${message.name})` : role),
    h("td", {}, h("span", { class: "badge" }, status)),
    h("td", { class: "reason" }, reasons.join("; ") || (seq === null ? madeByTheWindow(row) : "")),
    h("td", { class: "num" }, tokens(entry, row)),
    h("td", {}, row?.priority ?? "—"),
    h("td", {}, row?.category ?? entry?.kind ?? ""),
    h("td", { class: "text" }, messageCell(message, row)));
}

function madeByTheWindow(row) {
  return row.category === "summary"
    ? "the rolling summary of the messages folded into it (made by the window, not stored)"
    : "made by the window, not stored";
}

function tokens(entry, row) {
  const stored = row?.stored_tokens ?? entry?.tokens ?? 0;
  const now = row ? row.tokens : null;
  if (now === null || now === stored) return number.format(stored);
  return `${number.format(stored)} → ${number.format(now)}`;
}

function messageCell(message, row) {
  if (!message && row?.seq !== null && row?.preview.endsWith("…")) return later(row);
  const text = message ? textOf(message) : row?.preview ?? "";
  const line = text.split(/\s+/).join(" ").trim();
  if (line.length <= 90 && !text.includes("\n")) return h("span", { class: "whole" }, text);
  return h("details", {},
    h("summary", {}, `${line.slice(0, 90)}…`),
    h("pre", {}, text));
}

// A stored message the page has not read: its preview, and its whole text once opened.
function later(row) {
  const text = h("pre", {}, "Reading the message…");
  const details = h("details", {}, h("summary", {}, row.preview), text);
  details.addEventListener("toggle", async () => {
    if (!details.open || details.dataset.read) return;
    details.dataset.read = "true";
    try {
      const page = await api(sessionPath(state.session, "/messages"),
        { after: row.seq - 1, limit: 1 });
      const entry = page.data[0];
      text.textContent = entry?.id === row.id ? textOf(entry.message)
        : "The message is no longer stored.";
    } catch (error) {
      delete details.dataset.read;
      text.textContent = `Could not read the message: ${error.message}`;
    }
  });
  return details;
}

function textOf(message) {
  const parts = [];
  const content = message.content;
  if (typeof content === "string") parts.push(content);
  else if (Array.isArray(content)) {
    for (const part of content) parts.push(part.type === "text" ? part.text : `[${part.type}]`);
  }
  for (const call of message.tool_calls ?? []) {
    parts.push(`→ ${call.function?.name ?? "tool"}(${call.function?.arguments ?? ""})`);
  }
  return parts.join("\n");
}

// --- the numbers --------------------------------------------------------------------------

function summary(report, context) {
  const byState = report.messages_by_state ?? {};
  const order = (name) => (STATES.includes(name) ? STATES.indexOf(name) : STATES.length);
  const states = Object.entries(byState).filter(([, n]) => n)
    .sort(([a], [b]) => order(a) - order(b)).map(([name, n]) => `${n} ${name}`).join(", ");
  const earlier = report.earlier ?? { entries: 0, tokens: 0 };
  const pairs = [
    ["Model", `${context.model} (${whose(context)})`],
    ["Budget", plural(report.budget, "token")],
    ["Used", `${plural(report.used, "token")} (${percent(report.used, report.budget)})`],
    ["Headroom", plural(report.headroom, "token")],
    ["Reply reserve", plural(report.reserve_output ?? 0, "token")],
    ["Chat framing", plural(report.framing ?? 0, "token")],
    ["Messages by state", states || "none"],
    ["Left out", `${plural(report.evicted_entries, "message")},`
      + ` ${plural(report.evicted_tokens, "token")}`],
    ["Recalled", plural(report.recalled_entries, "message")],
    ["Evicted earlier", earlier.entries ? `${plural(earlier.entries, "message")},`
      + ` ${plural(earlier.tokens, "token")} (not itemised)` : null],
    ["Stable prefix", `the first ${report.stable_messages ?? 0} of`
      + ` ${plural(context.messages.length, "message")}`],
    ["Last eviction", report.last_step ?? "none yet"],
    ["Counts", report.estimated ? "estimated (the model's tokenizer is not known)" : "exact"],
  ];
  return pairs.filter(([, value]) => value !== null)
    .map(([term, value]) => h("div", {}, h("dt", {}, term), h("dd", {}, value)));
}

function whose(context) {
  const opened = state.opened;
  const source = context.model_source === "parameter" && opened?.model === context.model
    ? opened.source : context.model_source;
  if (source === "session") return "the session's last request";
  if (source === "default") return "the default: no request of this session named one";
  return "chosen above";
}

function percent(part, whole) {
  return whole ? `${Math.round((100 * part) / whole)}%` : "–";
}

// --- charts (inline SVG, text labels on everything) --------------------------------------

function chart(width, height, title, description) {
  const id = title.toLowerCase().replace(/[^a-z]+/g, "-");
  return s("svg", { viewBox: `0 0 ${width} ${height}`, width, height, role: "img",
    "aria-labelledby": `${id}-title ${id}-desc`, class: "chart" },
    s("title", { id: `${id}-title` }, title),
    s("desc", { id: `${id}-desc` }, description));
}

function categoryChart(report) {
  const bars = Object.entries(report.tokens_by_category ?? {}).filter(([, n]) => n > 0)
    .map(([name, n], i) => ({ name, tokens: n, fill: COLOURS[i % COLOURS.length] }));
  if (report.framing) bars.push({ name: "framing", tokens: report.framing, fill: "#555555" });
  if (report.reserve_output) {
    bars.push({ name: "reply reserve", tokens: report.reserve_output, fill: "#8c8c8c" });
  }
  const headroom = Math.max(0, report.budget - report.used);
  bars.push({ name: "headroom", tokens: headroom, fill: "url(#hatch)" });
  const scale = Math.max(report.budget, report.used, 1);
  const [left, barWidth, row] = [120, 560, 28];
  const height = 44 + bars.length * row;
  const describe = bars.map((b) => `${b.name} ${b.tokens}`).join(", ");
  const svg = chart(left + barWidth + 150, height, "Tokens by category",
    `${describe}; ${report.used} of a budget of ${report.budget} tokens used.`);
  svg.append(s("defs", {}, s("pattern", { id: "hatch", width: 6, height: 6,
    patternUnits: "userSpaceOnUse", patternTransform: "rotate(45)" },
  s("line", { x1: 0, y1: 0, x2: 0, y2: 6, stroke: "#555555", "stroke-width": 2 }))));
  const x = (tokens) => left + (barWidth * tokens) / scale;
  bars.forEach((bar, i) => {
    const y = 30 + i * row;
    svg.append(
      s("text", { x: left - 8, y: y + 15, "text-anchor": "end" }, bar.name),
      s("rect", { x: left, y: y + 2, width: Math.max(1, x(bar.tokens) - left), height: row - 8,
        fill: bar.fill, stroke: "#333333", "stroke-width": 0.5 }),
      s("text", { x: x(bar.tokens) + 6, y: y + 15 },
        `${number.format(bar.tokens)} (${percent(bar.tokens, report.budget)})`));
  });
  const at = x(report.budget);
  svg.append(
    s("line", { x1: at, y1: 22, x2: at, y2: height - 6, stroke: "#222222",
      "stroke-dasharray": "4 3" }),
    s("text", { x: at, y: 16, "text-anchor": "end" }, `budget ${number.format(report.budget)}`));
  return svg;
}

function turnsChart(items, report) {
  const points = cumulative(items);
  const [width, height, left, right, top, bottom] = [860, 320, 64, 20, 72, 44];
  const last = points[points.length - 1] ?? { seq: 0, stored: 0, held: 0 };
  const first = points[0]?.seq ?? 0;
  const span = Math.max(1, last.seq - first);
  const most = Math.max(last.stored, report.budget, 1) * 1.05;
  const x = (seq) => left + ((width - left - right) * (seq - first)) / span;
  const y = (tokens) => height - bottom - ((height - top - bottom) * tokens) / most;
  const svg = chart(width, height, "Tokens over turns",
    `The messages of this page add up to ${last.stored} tokens as stored at seq ${last.seq};`
    + ` the context holds ${last.held} tokens of them, against a budget of ${report.budget}.`);
  for (const tick of ticks(most)) {
    svg.append(
      s("line", { x1: left, x2: width - right, y1: y(tick), y2: y(tick), class: "grid" }),
      s("text", { x: left - 6, y: y(tick) + 4, "text-anchor": "end" }, number.format(tick)));
  }
  for (const tick of ticks(span).map((t) => t + first).filter((t) => t <= last.seq)) {
    svg.append(s("text", { x: x(tick), y: height - bottom + 16, "text-anchor": "middle" },
      String(Math.round(tick))));
  }
  const path = (key) => points.map((p, i) => `${i ? "L" : "M"}${x(p.seq).toFixed(1)},`
    + `${y(p[key]).toFixed(1)}`).join(" ");
  const lines = [
    { name: `this page as stored: ${number.format(last.stored)} tokens`, d: path("stored"),
      stroke: "#1f5fa8", dash: null, widthPx: 2 },
    { name: `of them in the context: ${number.format(last.held)} tokens`, d: path("held"),
      stroke: "#a34a00", dash: "7 3", widthPx: 3 },
    { name: `budget: ${number.format(report.budget)} tokens`,
      d: `M${left},${y(report.budget)} L${width - right},${y(report.budget)}`,
      stroke: "#222222", dash: "2 3", widthPx: 2 },
  ];
  lines.forEach((line, i) => {
    const ly = 12 + i * 18;
    svg.append(
      s("path", { d: line.d, fill: "none", stroke: line.stroke, "stroke-width": line.widthPx,
        "stroke-dasharray": line.dash }),
      s("line", { x1: left, x2: left + 28, y1: ly, y2: ly, stroke: line.stroke,
        "stroke-width": line.widthPx, "stroke-dasharray": line.dash }),
      s("text", { x: left + 36, y: ly + 4, class: "legend" }, line.name));
  });
  svg.append(
    s("line", { x1: left, x2: left, y1: top - 8, y2: height - bottom, class: "axis" }),
    s("line", { x1: left, x2: width - right, y1: height - bottom, y2: height - bottom,
      class: "axis" }),
    s("text", { x: (left + width - right) / 2, y: height - 6, "text-anchor": "middle",
      class: "axis-label" }, "seq of the stored message"),
    s("text", { x: 14, y: (top + height - bottom) / 2, "text-anchor": "middle",
      transform: `rotate(-90 14 ${(top + height - bottom) / 2})`, class: "axis-label" },
    "tokens (cumulative)"));
  return svg;
}

// Per stored message of the page, in seq order: the page's tokens so far, and how many of
// them the context holds.
function cumulative(items) {
  let stored = 0;
  let held = 0;
  const points = [];
  const seqOf = ({ entry, row }) => entry?.seq ?? row?.seq ?? null;
  const sorted = items.filter((item) => seqOf(item) !== null)
    .sort((a, b) => seqOf(a) - seqOf(b));
  for (const { entry, row } of sorted) {
    stored += row?.stored_tokens ?? entry.tokens;
    held += row && IN_CONTEXT.has(row.state) ? row.tokens : 0;
    points.push({ seq: seqOf({ entry, row }), stored, held });
  }
  return points;
}

function ticks(most) {
  const rough = most / 4;
  const power = 10 ** Math.floor(Math.log10(Math.max(rough, 1)));
  const step = [1, 2, 5, 10].map((m) => m * power).find((m) => m >= rough) ?? power * 10;
  const out = [];
  for (let t = 0; t <= most; t += step) out.push(t);
  return out;
}

// --- start --------------------------------------------------------------------------------

function start() {
  $("key-form").addEventListener("submit", useKey);
  $("forget-key").addEventListener("click", forgetKey);
  $("forget-key").hidden = !sessionStorage.getItem(KEY);
  $("build-form").addEventListener("submit", build);
  $("rows-form").addEventListener("submit", showRows);
  $("state-filter").addEventListener("change", showRows);
  $("next-page").addEventListener("click", () => turnPage(state.next, [...state.back, state.after]));
  $("previous-page").addEventListener("click", () => turnPage(state.back.at(-1) ?? 0,
    state.back.slice(0, -1)));
  $("first-page").addEventListener("click", () => turnPage(0, []));
  $("more").addEventListener("click", () => loadSessions(true));
  let typing;
  $("search").addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(() => loadSessions(), 250);
  });
  $("search-form").addEventListener("submit", (event) => {
    event.preventDefault();
    clearTimeout(typing);
    loadSessions();
  });
  $("sessions").addEventListener("click", (event) => {
    const link = event.target.closest("a");
    if (link && link.hash === location.hash) { // the open session again: rebuild it
      event.preventDefault();
      openSession(link.dataset.id, true);
    }
  });
  window.addEventListener("hashchange", () => route(true));
  loadSessions();
  route(false);
}

start();
