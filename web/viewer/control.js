// Who is in control of this desktop, live in the viewer's bar: idle, an agent (with its name)
// or a person; Take control / Hand back / Stop agent; view-only (in the Display panel, and
// ?view_only=1 in the address); and what the agent just did
// (a brief marker where it clicked or typed, and a list of its last actions in the panel the
// control pill opens; on phones the panel also holds the three buttons).
//
// createControl({viewer, grant, sid}) → {attach(rfb), follow(token)}. The feed is
// GET /vnc/{sid}/{token}/control (Server-Sent Events, the viewer capability); the buttons
// call the typed actions with this browser's session (desktop_take_control, desktop_hand_back,
// agent_stop), like the token refresh does. See docs/control.md.

const MAX_ACTIONS = 12;
const MARK_MS = 1600;
const RETRY_MS = 3000;

const byId = (id) => document.getElementById(id);

// The bar's sentence for a control state, from this viewer's point of view.
export function describeControl(control, me) {
  if (!control || control.state === "idle") return "Nobody is in control";
  if (control.state === "agent") return `Agent ${control.name} is in control`;
  const who = me && control.name === me ? "You are" : `${control.name} is`;
  return control.held ? `${who} in control (took control)` : `${who} in control`;
}

// One line of the agent's action list: what and where, never what was typed.
export function describeAction(action) {
  const at = Number.isFinite(action.x) && Number.isFinite(action.y)
    ? ` at ${Math.round(action.x)}, ${Math.round(action.y)}` : "";
  if (action.action === "type") return `typed ${action.text_length ?? "some"} characters`;
  if (action.action === "key") {
    const count = action.key_count ?? 1;
    return `pressed ${count === 1 ? "a key" : `${count} keys together`}`;
  }
  if (action.action === "drag" && Number.isFinite(action.to_x)) {
    return `dragged${at} to ${Math.round(action.to_x)}, ${Math.round(action.to_y)}`;
  }
  if (action.action === "scroll") return `scrolled ${action.direction || "down"}${at}`;
  return `${String(action.action).replace("_", " ")}${at}`;
}

async function csrf() {
  const response = await fetch("/api/v1/me", { credentials: "same-origin", cache: "no-store" });
  if (!response.ok) throw new Error("sign in to the chat first");
  const me = await response.json();
  return { token: me.csrf_token || "", username: me.user?.username || me.username || null };
}

class Control {
  constructor({ viewer, grant, sid }) {
    this.viewer = viewer;
    this.grant = grant;
    this.sid = sid;
    this.rfb = null;
    this.source = null;
    this.me = null;
    this.state = { control: { state: "idle" }, actions: [], viewOnly: false, error: null };
    window.relaydeskControl = this.state;
    this.state.viewOnly = new URLSearchParams(window.location.search).get("view_only") === "1";
    for (const [ids, name] of [[["take-control", "menu-take-control"], "desktop_take_control"],
      [["hand-back", "menu-hand-back"], "desktop_hand_back"],
      [["stop-agent", "menu-stop-agent"], "agent_stop"]]) {
      for (const id of ids) byId(id).addEventListener("click", () => this.act(name));
    }
    byId("view-only").addEventListener("change", (event) => this.setViewOnly(event.target.checked));
    csrf().then(({ username }) => { this.me = username; this.show(); }).catch(() => {});
    this.show();
  }

  attach(rfb) {
    this.rfb = rfb;
    rfb.viewOnly = this.state.viewOnly || this.viewer.paused;
  }

  setViewOnly(on) {
    this.state.viewOnly = on;
    if (this.rfb) this.rfb.viewOnly = on || this.viewer.paused;
    const url = new URL(window.location.href);
    if (on) url.searchParams.set("view_only", "1");
    else url.searchParams.delete("view_only");
    window.history.replaceState(null, "", url.pathname + url.search);
    this.show();
  }

  // Follow the control feed of the desktop with the viewer's current token.
  follow(token) {
    if (this.source) this.source.close();
    const source = new EventSource(`/vnc/${this.sid}/${token}/control`);
    this.source = source;
    source.addEventListener("control", (event) => {
      this.state.control = JSON.parse(event.data).control;
      this.show();
    });
    source.addEventListener("agent_action", (event) => this.acted(JSON.parse(event.data)));
    // Recorded or not (docs/recording.md): the bar's REC mark.
    source.addEventListener("recording", (event) => {
      byId("rec-mark").hidden = !JSON.parse(event.data).recording;
    });
    // Paused or running again (docs/desktops.md, "Pause and resume").
    source.addEventListener("desktop_state", (event) =>
      this.viewer.desktopState(JSON.parse(event.data).state));
    source.addEventListener("error", () => {
      // A refused feed (an expired token) is closed for good: try again with the token then.
      if (source.readyState === EventSource.CLOSED && this.source === source) {
        setTimeout(() => { if (this.source === source) this.follow(this.viewer.token); }, RETRY_MS);
      }
    });
  }

  async act(name) {
    this.state.error = null;
    try {
      const { token, username } = await csrf();
      this.me = username;
      const response = await fetch(`/api/v1/actions/${name}`, {
        method: "POST",
        credentials: "same-origin",
        headers: { "Content-Type": "application/json", "X-CSRF-Token": token },
        body: JSON.stringify({ conversation_id: this.grant.c, relay: this.grant.r,
          desktop_session_id: this.sid }),
      });
      const body = await response.json();
      if (!response.ok) throw new Error(body?.error?.message || `error ${response.status}`);
      this.state.control = body.control;
    } catch (err) {
      this.state.error = err.message;
    }
    this.show();
    this.rfb?.focus();
  }

  show() {
    const control = this.state.control || { state: "idle" };
    document.body.dataset.control = control.state;
    byId("control").dataset.state = control.state;
    const said = describeControl(control, this.me) + (this.state.viewOnly ? " · view only" : "");
    byId("control-text").textContent = this.state.error ? `${said} — ${this.state.error}` : said;
    const held = control.state === "person" && control.held;
    for (const prefix of ["", "menu-"]) {
      byId(`${prefix}take-control`).hidden = held;
      byId(`${prefix}hand-back`).hidden = !held;
      byId(`${prefix}stop-agent`).hidden = !control.agent;
    }
    byId("view-only").checked = this.state.viewOnly;
    document.body.dataset.viewOnly = String(this.state.viewOnly);
  }

  acted(action) {
    this.state.actions.unshift(action);
    this.state.actions.length = Math.min(this.state.actions.length, MAX_ACTIONS);
    const list = byId("agent-actions");
    const time = new Date((action.at || Date.now() / 1000) * 1000).toLocaleTimeString();
    const item = document.createElement("li");
    item.textContent = `${time} ${action.agent}: ${describeAction(action)}`;
    list.prepend(item);
    while (list.children.length > MAX_ACTIONS) list.lastElementChild.remove();
    byId("agent-idle").hidden = true;
    this.mark(action);
  }

  // A brief ring where the agent acted (its desktop pixels mapped onto the picture).
  mark(action) {
    const canvas = byId("screen").querySelector("canvas");
    if (!canvas || !Number.isFinite(action.x) || !Number.isFinite(action.y)) return;
    const box = canvas.getBoundingClientRect();
    const screen = byId("screen").getBoundingClientRect();
    const viewport = this.rfb?._display?._viewportLoc || { x: 0, y: 0 };
    const scale = box.width / (canvas.width || 1);
    const mark = document.createElement("div");
    mark.className = `agent-mark agent-${action.action}`;
    mark.style.left = `${box.left - screen.left + (action.x - viewport.x) * scale}px`;
    mark.style.top = `${box.top - screen.top + (action.y - viewport.y) * scale}px`;
    mark.setAttribute("aria-hidden", "true");
    byId("screen").append(mark);
    setTimeout(() => mark.remove(), MARK_MS);
  }
}

export function createControl(options) {
  return new Control(options);
}
