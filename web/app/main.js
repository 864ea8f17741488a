// relaydesk's web app: login, conversations, the chat transcript (live over SSE), the
// composer with /desktop commands, and the Active Desktops dock.
import * as api from "./api.js";
import { Composer } from "./composer.js";
import { Dock } from "./dock.js";
import { Recordings } from "./recordings.js";
import { byId, el } from "./dom.js";
import { followInventory, renderMessage } from "./render.js";
import { closeViewerTabs, reserveTab, showInTab, tabForSession } from "./viewers.js";

const CONVERSATION_KEY = "relaydesk.conversation";
const OPENING = new Set(["open", "attach"]);

const state = {
  user: null,
  conversationId: null,
  role: null,
  relays: [],
  seen: new Set(),
  events: null,
};

function setView(view) {
  document.body.dataset.view = view;
  byId("login-view").hidden = view !== "login";
  byId("app-view").hidden = view !== "app";
}

// -- login ------------------------------------------------------------------------------

function showLogin(note = "") {
  stopEvents();
  setView("login");
  byId("login-note").textContent = note;
  byId("login-username").focus();
}

byId("login-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const error = byId("login-error");
  error.textContent = "";
  try {
    const result = await api.login(byId("login-username").value, byId("login-password").value);
    byId("login-password").value = "";
    api.setCsrfToken(result.csrf_token);
    await start(result.user);
  } catch (err) {
    error.textContent = err.message;
  }
});

let signingOut = false;
api.onUnauthorized(() => {
  if (document.body.dataset.view === "app" && !signingOut) {
    showLogin("Your session has ended. Sign in again; your message is kept.");
  }
});

byId("logout-button").addEventListener("click", async () => {
  signingOut = true;
  try {
    await api.logout();
  } finally {
    signingOut = false;
    showLogin("Signed out.");
  }
});

// -- conversations ----------------------------------------------------------------------

async function start(user) {
  state.user = user;
  byId("whoami").textContent = user.username;
  composer.ready(false);
  setView("app");
  const { conversations } = await api.conversations();
  showConversations(conversations);
  const wanted = fromHash() || sessionStorage.getItem(CONVERSATION_KEY);
  const chosen = conversations.find((c) => c.conversation_id === wanted) || conversations[0];
  showEmptyState(!chosen, user);
  if (chosen) await openConversation(chosen.conversation_id);
}

function showConversations(conversations) {
  byId("conversation-list").replaceChildren(...conversations.map((c) => el("li", {},
    el("a", { href: `#/c/${encodeURIComponent(c.conversation_id)}`,
      dataset: { id: c.conversation_id } }, c.title, el("span", { class: "role", text: ` · ${c.role}` })))));
  byId("conversation-select").replaceChildren(...conversations.map((c) =>
    el("option", { value: c.conversation_id, text: `${c.title} · ${c.role}` })));
}

// No conversation: say what relaydesk needs and who can give it, instead of a composer that
// could only answer "conversation not found".
function showEmptyState(empty, user) {
  document.body.dataset.empty = String(empty);
  byId("empty-state").hidden = !empty;
  byId("chat").hidden = empty;
  byId("conversations").hidden = empty;
  byId("dock-button").hidden = empty;
  if (empty) composer.ready(false); // else it opens with the conversation
  byId("conversation-title").textContent = empty ? "No conversations yet" : "";
  byId("empty-command").textContent =
    `relaydesk admin create-conversation "Team" --member ${user.username}:write`;
}

byId("conversation-select").addEventListener("change", (event) => {
  window.location.hash = `#/c/${encodeURIComponent(event.target.value)}`;
});

function fromHash() {
  const match = /^#\/c\/(.+)$/.exec(window.location.hash);
  return match ? decodeURIComponent(match[1]) : null;
}

window.addEventListener("hashchange", () => {
  const id = fromHash();
  if (id && id !== state.conversationId && document.body.dataset.view === "app") openConversation(id);
});

async function openConversation(id) {
  const info = await api.conversation(id);
  state.conversationId = id;
  state.role = info.role;
  state.relays = info.relays.map((r) => r.name);
  state.seen = new Set();
  sessionStorage.setItem(CONVERSATION_KEY, id);
  if (fromHash() !== id) history.replaceState(null, "", `#/c/${encodeURIComponent(id)}`);
  byId("conversation-title").textContent = info.title;
  byId("conversation-select").value = id;
  for (const link of document.querySelectorAll("#conversation-list a")) {
    if (link.dataset.id === id) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  composer.use(id, state.relays);
  byId("transcript").replaceChildren();
  const page = await api.messages(id);
  page.messages.forEach(addMessage);
  startEvents(id);
  await dock.use(id);
  recordings.use(id);
  byId("composer-input").focus();
}

// -- transcript -------------------------------------------------------------------------

function addMessage(message) {
  if (message.id !== null && message.id !== undefined) {
    if (state.seen.has(message.id)) return;
    state.seen.add(message.id);
  }
  const transcript = byId("transcript");
  const nearBottom = transcript.scrollHeight - transcript.scrollTop - transcript.clientHeight < 80;
  transcript.append(renderMessage(message, handlers));
  if (nearBottom || message.author?.user_id === state.user?.user_id || message.id === null) {
    transcript.scrollTop = transcript.scrollHeight;
  }
}

const handlers = {
  fillComposer: (text) => composer.fill(text),
  runCommand: (text) => send(text),
  openDesktop: (row) => openDesktop(row),
  requestStop: (payload) => requestStop(payload),
};

// -- live events ------------------------------------------------------------------------

function stopEvents() {
  if (state.events) state.events.close();
  state.events = null;
}

function startEvents(id) {
  stopEvents();
  const source = new EventSource(`/api/v1/events?conversation_id=${encodeURIComponent(id)}`);
  state.events = source;
  const status = byId("live-status");
  source.addEventListener("open", () => { status.textContent = ""; });
  source.addEventListener("message_created", (event) => addMessage(JSON.parse(event.data)));
  source.addEventListener("desktop_inventory_changed", (event) => {
    const data = JSON.parse(event.data);
    dock.update(data.desktops || [], data.changed || []);
  });
  for (const name of ["safety_checks_pending", "safety_checks_decided"]) {
    source.addEventListener(name, () => dock.refreshApprovals());
  }
  source.addEventListener("desktop_control_changed", (event) => {
    dock.controlChanged(JSON.parse(event.data));
  });
  source.addEventListener("error", async () => {
    if (source.readyState !== EventSource.CLOSED) {
      status.textContent = "Reconnecting to live updates…";
      return;
    }
    // A closed stream: find out whether the session ended (then api shows the login).
    try {
      await api.me();
      status.textContent = "Live updates stopped; reconnecting…";
      setTimeout(() => { if (state.events === source) startEvents(id); }, 2000);
    } catch {
      /* onUnauthorized has shown the login */
    }
  });
}

// -- sending and commands ---------------------------------------------------------------

function commandWord(text) {
  const words = text.trim().toLowerCase().split(/\s+/);
  if (words[0] !== "/desktop") return null;
  const second = words[1];
  if (["list", "status", "stop", "close", "help"].includes(second)) return second;
  return second === "attach" ? "attach" : "open";
}

async function send(text) {
  const word = commandWord(text);
  // A tab opened now, inside the key/click gesture, is never blocked as a pop-up.
  const tab = OPENING.has(word) ? reserveTab() : null;
  let result;
  try {
    result = await api.postMessage(state.conversationId, text);
  } catch (err) {
    showInTab(tab, null);
    if (err.status !== 401) byId("composer-error").textContent = err.message;
    return false;
  }
  if (result.message) addMessage(result.message);
  if (result.reply) addMessage(result.reply);
  afterCommand(result.reply?.payload, result.private || {}, tab);
  return true;
}

function afterCommand(payload, secret, tab) {
  showInTab(tab, payload && secret.viewer_url ? secret.viewer_url : null,
    payload?.desktop?.desktop_session_id);
  if (!payload) return;
  if (payload.outcome === "confirm_required" && payload.desktop) dock.askStop(payload.desktop);
  if (payload.outcome === "close_viewer") closeViewerTabs();
}

async function openDesktop(row) {
  // The session's own tab if one is open (the one `/desktop` opened): brought forward.
  const { tab, showing } = tabForSession(row.desktop_session_id);
  if (showing) return;
  const { status, body } = await api.action("desktop_attach", {
    conversation_id: state.conversationId,
    relay: row.relay_name || row.relay || row.relay_id,
    kind: row.kind,
    slot: row.slot || "main",
  });
  const url = status === 200 ? body.viewer_url : null;
  showInTab(tab, url, row.desktop_session_id);
  if (!url) byId("dock-message").textContent = `Cannot open: ${body?.error?.message || status}`;
}

async function requestStop(payload) {
  const { status, body } = await api.action("desktop_stop_request", {
    conversation_id: state.conversationId,
    relay: payload.relay, kind: payload.kind || "virtual", slot: "main",
  });
  const row = status === 200 ? (body.desktop || body.row) : null;
  if (row) dock.askStop(row);
  else byId("composer-error").textContent = body?.error?.message || "Nothing to stop.";
}

const composer = new Composer({
  form: byId("composer"),
  input: byId("composer-input"),
  list: byId("suggestions"),
  error: byId("composer-error"),
  onSend: send,
});
const recordings = new Recordings();
const dock = new Dock({
  openDesktop,
  isOperator: () => Boolean(state.user?.is_admin),
  onInventory: (rows, changed) => followInventory(byId("transcript"), rows, changed),
});

// -- boot -------------------------------------------------------------------------------

async function boot() {
  try {
    const who = await api.me();
    api.setCsrfToken(who.csrf_token);
    await start(who.user);
  } catch (err) {
    if (err.status === 401) showLogin();
    else showLogin(`The server could not be reached (${err.message}).`);
  }
}

window.relaydeskApp = state;
boot();
