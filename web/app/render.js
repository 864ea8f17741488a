// Transcript rendering: user messages as plain text, result messages from their structured
// payload (command, outcome, rows, suggestions). Buttons call back into the app through
// `handlers` ({fillComposer, openDesktop, requestStop}).
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

function renderResult(message, handlers) {
  const payload = message.payload;
  const body = el("div", { class: "result" });
  body.append(el("p", { class: "message-text", text: message.text }));
  if (payload.requested_by) {
    body.append(el("p", { class: "requested", text: `for ${payload.requested_by}` }));
  }
  const renderer = OUTCOMES[payload.outcome];
  if (renderer) body.append(...[renderer(payload, handlers)].flat().filter(Boolean));
  return body;
}

function suggestionButton(text, handlers) {
  return el("button", {
    type: "button", class: "suggestion",
    onclick: () => handlers.fillComposer(text),
  }, text);
}

function desktopCard(row, handlers) {
  if (!row) return null;
  const state = row.state || "running";
  return el("dl", { class: `details desktop-card state-${state}`,
    dataset: { session: row.desktop_session_id, state } },
    el("dt", { text: "Relay" }), el("dd", { text: relayName(row) }),
    el("dt", { text: "Kind" }), el("dd", { text: row.kind || "virtual" }),
    el("dt", { text: "State" }), el("dd", { class: "card-state", text: state }),
    el("dt", { text: "Started by" }), el("dd", { text: row.started_by || "—" }),
    el("dt", { text: "Session" }),
    el("dd", {}, el("code", { title: row.desktop_session_id, text: shortId(row.desktop_session_id) })));
}

function rowsTable(rows, handlers) {
  if (!rows || rows.length === 0) return el("p", { class: "note", text: "No desktops." });
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
  started: (p, h) => [desktopCard(p.desktop, h), openButton(p, h)],
  attached: (p, h) => [desktopCard(p.desktop, h), openButton(p, h)],
  restarted: (p, h) => [
    el("p", { class: "warning",
      text: `Session ${shortId(p.replaced_session_id)} did not answer; this is a new session.` }),
    desktopCard(p.desktop, h), openButton(p, h)],
  listed: (p, h) => rowsTable(p.desktops, h),
  status: (p, h) => rowsTable(p.desktops, h),
  confirm_required: (p, h) => [desktopCard(p.desktop, h),
    el("button", { type: "button", class: "danger", onclick: () => h.requestStop(p) }, "Stop…")],
  not_running: (p, h) => suggestionButton(`/desktop ${p.relay}`, h),
  choose_relay: (p, h) => el("div", { class: "choices" },
    ...(p.relays || []).map((name) => suggestionButton(commandFor(p, name), h))),
  unknown_relay: (p, h) => p.suggestion ? suggestionButton(
    p.suggestion.startsWith("/") ? p.suggestion : `/desktop ${p.suggestion}`, h) : null,
  parse_error: (p, h) => p.suggestion ? suggestionButton(p.suggestion, h) : null,
  help: (p) => el("dl", { class: "help" }, ...(p.lines || []).flatMap((line) => [
    el("dt", {}, el("code", { text: line.usage })), el("dd", { text: line.description })])),
  error: (p) => el("p", { class: "error", text: `${p.error?.code || "error"}: ${p.error?.message || ""}` }),
  close_viewer: () => null,
};

function commandFor(payload, relay) {
  if (payload.command === "open") return payload.kind === "local" ? `/desktop local ${relay}` : `/desktop ${relay}`;
  return `/desktop ${payload.command} ${relay}`;
}

function openButton(payload, handlers) {
  if (!payload.desktop) return null;
  return el("button", { type: "button", class: "open-viewer",
    dataset: { session: payload.desktop.desktop_session_id },
    onclick: () => handlers.openDesktop(payload.desktop) }, "Open viewer");
}

// Desktop cards and listed rows in the transcript follow the inventory: each says what its
// session is doing now ("stopped" once it is gone from it), and only a running one can be opened.
export function followInventory(root, rows) {
  const bySession = new Map(rows.map((row) => [row.desktop_session_id, row]));
  for (const item of root.querySelectorAll(".desktop-card[data-session], tr.desktop-row[data-session]")) {
    const state = bySession.get(item.dataset.session)?.state || "stopped";
    if (item.dataset.state === state) continue;
    item.classList.replace(`state-${item.dataset.state}`, `state-${state}`);
    item.dataset.state = state;
    const cell = item.querySelector(".card-state, .row-state");
    cell.textContent = state;
    cell.title = STATE_NOTES[state] || "";
  }
  for (const button of root.querySelectorAll("button.open-viewer[data-session]")) {
    const running = bySession.get(button.dataset.session)?.state === "running";
    button.disabled = !running;
    if (running) button.removeAttribute("title");
    else button.title = "This desktop session is not running any more";
  }
}
