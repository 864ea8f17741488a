// Transcript rendering: user messages as plain text, result messages from their structured
// payload (command, outcome, rows, suggestions). Buttons call back into the app through
// `handlers` ({fillComposer, runCommand, openDesktop, requestStop}).
import { el, formatTime, relayName, shortId, STATE_NOTES } from "./dom.js";

export function renderMessage(message, handlers) {
  const kind = message.kind || "user";
  const item = el("li", {
    class: `message message-${kind}`,
    dataset: { id: message.id ?? "", kind, outcome: message.payload?.outcome || "" },
  });
  const who = message.author ? message.author.username : "relaydesk";
  const head = el("div", { class: "message-head" },
    el("span", { class: "author", text: who }),
    el("time", { datetime: message.created_at || "", text: formatTime(message.created_at) }));
  item.append(head);
  if (kind === "result" && message.payload) {
    item.append(renderResult(message, handlers));
  } else {
    item.append(el("p", { class: "message-text", text: message.text }));
  }
  return item;
}

// Outcomes whose structured part says everything the text says: the text is not repeated.
const TEXT_SHOWN_AS_TABLE = new Set(["help"]);
const ENDED = new Set(["stopped", "failed"]);

function renderResult(message, handlers) {
  const payload = message.payload;
  const body = el("div", { class: "result" });
  if (!TEXT_SHOWN_AS_TABLE.has(payload.outcome)) {
    body.append(el("p", { class: "message-text", text: message.text }));
  }
  if (payload.requested_by) {
    body.append(el("p", { class: "requested", text: `for ${payload.requested_by}` }));
  }
  const renderer = OUTCOMES[payload.outcome];
  if (renderer) {
    body.append(...[renderer(payload, handlers, message.desktop_now)].flat().filter(Boolean));
  }
  return body;
}

function suggestionButton(text, handlers) {
  return el("button", {
    type: "button", class: "suggestion",
    onclick: () => handlers.fillComposer(text),
  }, text);
}

// The exact command that opens this row's desktop again (a relay named like a keyword is
// reached as "/desktop virtual NAME", never mistaken for the keyword).
const KEYWORDS = new Set(["virtual", "docker", "local", "list", "status", "attach", "stop",
  "apps", "take", "hand-back", "stop-agent", "close", "help"]);
export function openCommand(relay, kind) {
  if (kind === "local" || kind === "docker") return `/desktop ${kind} ${relay}`;
  return KEYWORDS.has(String(relay).toLowerCase()) ? `/desktop virtual ${relay}` : `/desktop ${relay}`;
}

// One line telling how the session started, or how it ended.
export function cardStory(row, now) {
  const started = `Started by ${row.started_by || "someone"} at ${formatTime(row.started_at)}`;
  if (!now || !ENDED.has(now.state)) return started;
  const at = formatTime(now.updated_at);
  const reason = String(now.reason || "");
  const by = /^stopped by (.+)$/.exec(reason);
  if (by) return `Stopped by ${by[1]} at ${at}`;
  if (reason === "replaced") return `Replaced by a new session at ${at}`;
  if (reason === "relay_restarted") return `Ended when its relay restarted, at ${at}`;
  if (now.state === "failed") return `Failed at ${at}${reason ? `: ${reason}` : ""}`;
  return `Stopped at ${at}`;
}

function desktopCard(row, handlers, now) {
  if (!row) return null;
  const state = now?.state || row.state || "running";
  const slot = row.slot || "main";
  const card = el("div", { class: `desktop-card state-${state}`,
    dataset: { session: row.desktop_session_id, state } },
    el("dl", { class: "details" },
      el("dt", { text: "Relay" }), el("dd", { text: relayName(row) }),
      el("dt", { text: "Kind" }), el("dd", { text: row.kind || "virtual" }),
      slot !== "main" ? [el("dt", { text: "Slot" }), el("dd", { text: slot })] : null,
      el("dt", { text: "State" }), el("dd", { class: "card-state", text: state }),
      el("dt", { text: "Session" }),
      el("dd", {}, el("code", { title: row.desktop_session_id, text: shortId(row.desktop_session_id) }))),
    el("p", { class: "card-story", text: cardStory(row, now) }),
    el("div", { class: "card-actions" },
      el("button", { type: "button", class: "open-viewer",
        dataset: { session: row.desktop_session_id },
        disabled: ENDED.has(state),
        onclick: () => handlers.openDesktop(row) }, "Open viewer"),
      el("button", { type: "button", class: "start-again quiet", hidden: !ENDED.has(state),
        onclick: () => handlers.runCommand(openCommand(relayName(row), row.kind)) }, "Start again")));
  card.row = row;
  return card;
}

function rowsTable(rows, handlers) {
  if (!rows || rows.length === 0) return null; // the message text already says so
  const table = el("table", { class: "rows" },
    el("thead", {}, el("tr", {},
      ...["Relay", "Kind", "Slot", "State", "Started by", "Started at", "Session", ""].map(
        (h) => el("th", { scope: "col", text: h })))));
  const tbody = el("tbody");
  for (const row of rows) {
    const tr = el("tr", { class: `desktop-row state-${row.state}`,
      dataset: { session: row.desktop_session_id, state: row.state } },
      el("td", { text: relayName(row) }), el("td", { text: row.kind }),
      el("td", { text: row.slot || "main" }),
      el("td", { class: "row-state", text: row.state, title: STATE_NOTES[row.state] || "" }),
      el("td", { text: row.started_by || "—" }), el("td", { text: formatTime(row.started_at) }),
      el("td", {}, el("code", { text: shortId(row.desktop_session_id) })),
      el("td", {}, row.state === "running"
        ? el("button", { type: "button", class: "open-viewer",
          dataset: { session: row.desktop_session_id },
          onclick: () => handlers.openDesktop(row) }, "Open")
        : null));
    tbody.append(tr);
  }
  table.append(tbody);
  return table;
}

const OUTCOMES = {
  started: (p, h, now) => desktopCard(p.desktop, h, now),
  attached: (p, h, now) => desktopCard(p.desktop, h, now),
  restarted: (p, h, now) => [
    el("p", { class: "warning",
      text: `Session ${shortId(p.replaced_session_id)} did not answer; this is a new session.` }),
    desktopCard(p.desktop, h, now)],
  listed: (p, h) => rowsTable(p.desktops, h),
  status: (p, h) => rowsTable(p.desktops, h),
  confirm_required: (p, h, now) => [desktopCard(p.desktop, h, now),
    el("button", { type: "button", class: "danger", onclick: () => h.requestStop(p) }, "Stop…")],
  not_running: (p, h) => suggestionButton(p.suggestion || openCommand(p.relay, p.kind), h),
  choose_relay: (p, h) => el("div", { class: "choices" },
    ...(p.commands || (p.relays || []).map((name) => commandFor(p, name)))
      .map((text) => suggestionButton(text, h))),
  unknown_relay: (p, h) => p.suggestion ? suggestionButton(
    p.suggestion.startsWith("/") ? p.suggestion : commandFor(p, p.suggestion), h) : null,
  parse_error: (p, h) => p.suggestion ? suggestionButton(p.suggestion, h) : null,
  help: (p) => el("dl", { class: "help" }, ...(p.lines || []).flatMap((line) => [
    el("dt", {}, el("code", { text: line.usage })), el("dd", { text: line.description })])),
  error: () => null, // the text already says what happened and what to do
  close_viewer: () => null,
};

function commandFor(payload, relay) {
  if (payload.command === "open") return openCommand(relay, payload.kind);
  return `/desktop ${payload.command} ${relay}`;
}

// Desktop cards and listed rows in the transcript follow the inventory: each says what its
// session is doing now ("stopped" once it is gone from it), and only a running one can be opened.
export function followInventory(root, rows, changed = []) {
  const bySession = new Map(rows.map((row) => [row.desktop_session_id, row]));
  const ended = new Map(changed.filter((row) => ENDED.has(row.state))
    .map((row) => [row.desktop_session_id, row]));
  for (const item of root.querySelectorAll(".desktop-card[data-session], tr.desktop-row[data-session]")) {
    const session = item.dataset.session;
    const state = bySession.get(session)?.state || ended.get(session)?.state || "stopped";
    const story = item.querySelector(".card-story");
    if (story && ended.has(session)) story.textContent = cardStory(item.row || {}, ended.get(session));
    if (item.dataset.state === state) continue;
    item.classList.replace(`state-${item.dataset.state}`, `state-${state}`);
    item.dataset.state = state;
    const cell = item.querySelector(".card-state, .row-state");
    cell.textContent = state;
    cell.title = STATE_NOTES[state] || "";
    const again = item.querySelector(".start-again");
    if (again) again.hidden = bySession.has(session) && !ENDED.has(state);
  }
  for (const button of root.querySelectorAll("button.open-viewer[data-session]")) {
    const running = bySession.get(button.dataset.session)?.state === "running";
    button.disabled = !running;
    if (running) button.removeAttribute("title");
    else button.title = "This desktop session is not running any more";
  }
}
