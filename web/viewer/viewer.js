// relaydesk's viewer page: noVNC's RFB over the server's viewer WebSocket.
//
// The page learns the desktop session and its capability token from its own path
// (/vnc/{sid}/{token}/) and builds the WebSocket URL from the origin, so it works under any
// page path. The server closes refused or ended streams with one of the codes below; final
// ones show the overlay, the others reconnect with backoff while the desktop runs.
import RFB from "/novnc/core/rfb.js";
import { installBridge } from "/viewer/bridge.js";
import { createControl } from "/viewer/control.js";
import { createToolbar } from "/viewer/toolbar.js";

export const CLOSE = Object.freeze({
  UNKNOWN_SESSION: 4404,
  VIEWER_EXPIRED: 4401,
  VIEWER_FORBIDDEN: 4403,
  RELAY_UNREACHABLE: 4502,
  DESKTOP_STOPPED: 4410,
  DESKTOP_PAUSED: 4423,
});

// code → [page state, overlay title, overlay text]; these end the page's attempts.
const FINAL = new Map([
  [CLOSE.DESKTOP_STOPPED, ["stopped", "Desktop stopped",
    "This desktop is no longer running. Start it again from the chat."]],
  [CLOSE.VIEWER_EXPIRED, ["expired", "Access expired",
    "This viewer link has expired. Open the desktop again from the chat."]],
  [CLOSE.VIEWER_FORBIDDEN, ["forbidden", "Access denied",
    "This viewer link does not grant access to the desktop."]],
  [CLOSE.UNKNOWN_SESSION, ["unknown", "Unknown desktop",
    "No desktop with this session is known."]],
]);

const BACKOFF_FIRST_S = 0.5;
// A paused desktop is asked again this often: the server answers from its inventory (the
// frozen desktop is never touched), and the first attempt after a resume gets the picture.
const PAUSED_RETRY_S = 1;
const PAUSED = ["Desktop paused",
  "This desktop is paused: its programs are frozen as they were. The picture comes back by itself when it is resumed."];
const BACKOFF_MAX_S = 8;
// Renew the capability this long before it expires (through desktop_attach).
const REFRESH_AHEAD_S = 120;
const REFRESH_MIN_S = 5;

export function sessionFromPath(pathname) {
  const match = /^\/vnc\/([^/]+)\/([^/]+)\/?/.exec(pathname);
  return match ? { sid: match[1], token: match[2] } : null;
}

export function socketUrl(location, sid, token) {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  return `${scheme}//${location.host}/vnc/${sid}/${token}/websockify`;
}

// The grant inside a token: {u, c, r, s, e} (user, conversation, relay, session, expiry).
export function grantOf(token) {
  try {
    const body = token.split(".")[0].replace(/-/g, "+").replace(/_/g, "/");
    return JSON.parse(atob(body + "=".repeat((4 - (body.length % 4)) % 4)));
  } catch {
    return null;
  }
}

// A fresh token for the same desktop session, through the typed action desktop_attach with
// this browser's session cookie; null when there is none or the desktop is no longer running.
export async function refreshToken(sid, token) {
  const grant = grantOf(token);
  if (!grant) return null;
  try {
    const me = await fetch("/api/v1/me", { credentials: "same-origin", cache: "no-store" });
    if (!me.ok) return null;
    const { csrf_token: csrf } = await me.json();
    const response = await fetch("/api/v1/actions/desktop_attach", {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf || "" },
      body: JSON.stringify({ conversation_id: grant.c, relay: grant.r, desktop_session_id: sid }),
    });
    if (!response.ok) return null;
    const { viewer_url: url } = await response.json();
    const fresh = sessionFromPath(new URL(url, window.location.href).pathname);
    return fresh && fresh.sid === sid ? fresh.token : null;
  } catch {
    return null;
  }
}

// After a desktop_reset the stopped session has a successor in its slot: desktop_attach on
// the old session answers 409 desktop_changed with the new id, and desktop_attach on that one
// the new viewer URL. The old stream closes as the new desktop starts, and the reset is
// recorded once that start is done (a cold start under load takes seconds): so the old
// session is asked again while the server still lists it running, or answers not_running
// with reason "reset" (the relay said it ended, the new one is not recorded yet), up to
// SUCCESSOR_WAIT_S. null when there is no successor (a real stop) or no cookie session.
const SUCCESSOR_WAIT_S = 60;
const SUCCESSOR_RETRY_MS = 500;
async function attach(grant, csrf, sid) {
  const response = await fetch("/api/v1/actions/desktop_attach", {
    method: "POST",
    credentials: "same-origin",
    headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf || "" },
    body: JSON.stringify({ conversation_id: grant.c, relay: grant.r, desktop_session_id: sid }),
  });
  return { status: response.status, body: await response.json().catch(() => ({})) };
}

export async function successorUrl(sid, token) {
  const grant = grantOf(token);
  if (!grant) return null;
  const deadline = performance.now() + SUCCESSOR_WAIT_S * 1000;
  try {
    const me = await fetch("/api/v1/me", { credentials: "same-origin", cache: "no-store" });
    if (!me.ok) return null;
    const { csrf_token: csrf } = await me.json();
    while (performance.now() < deadline) {
      const { status, body } = await attach(grant, csrf, sid);
      const error = body.error || {};
      if (status === 409 && error.code === "desktop_changed" && error.current_session_id) {
        const next = await attach(grant, csrf, error.current_session_id);
        if (next.status === 200) return next.body.viewer_url;
        if (next.status !== 409) return null;  // not ours to ask; a 409: not running yet
      } else if (status !== 200 && !(error.code === "not_running" && error.reason === "reset")) {
        return null;  // stopped for good, or not ours to ask
      }
      await new Promise((resolve) => setTimeout(resolve, SUCCESSOR_RETRY_MS));
    }
  } catch {
    return null;
  }
  return null;
}

// Calls `callback` once the first framebuffer update that carries pixels has been drawn.
// "Connected" waits for it, so the page never claims a connection while it shows no picture
// (the RFB handshake ends well before the first full-screen update has arrived on a slow
// link). noVNC 1.7 (pinned in web/package.json) has no event for it: the hook wraps its
// update handler and looks at each rectangle's encoding (pixel encodings are >= 0, and
// TightPNG is -260; the other negative ones are pseudo-encodings such as the cursor).
const TIGHT_PNG = -260;
export function onFirstPicture(rfb, callback) {
  const handle = rfb._framebufferUpdate;
  const handleRect = rfb._handleRect;
  if (typeof handle !== "function" || typeof handleRect !== "function") {
    rfb.addEventListener("connect", callback, { once: true });
    return;
  }
  let pixels = false;
  rfb._handleRect = function patchedRect(...args) {
    const encoding = this._FBU.encoding;
    if (encoding >= 0 || encoding === TIGHT_PNG) pixels = true;
    return handleRect.apply(this, args);
  };
  rfb._framebufferUpdate = function patchedUpdate(...args) {
    const done = handle.apply(this, args);
    if (done && pixels) {
      rfb._framebufferUpdate = handle;
      rfb._handleRect = handleRect;
      rfb._display.flush().then(callback);
    }
    return done;
  };
}

// ResizeObserver "loop" notices are benign; noVNC must never treat them as fatal.
window.addEventListener("error", (event) => {
  if (/ResizeObserver loop/.test(event.message || "")) {
    event.stopImmediatePropagation();
    event.preventDefault();
  }
}, true);

class Viewer {
  constructor(screen, sid, token) {
    this.screen = screen;
    this.sid = sid;
    this.rfb = null;
    this.attempt = 0;
    this.timer = null;
    this.refreshTimer = null;
    this.info = { state: "connecting", connects: 0, lastClose: null, refreshes: 0,
      firstPictureMs: null };
    this.userDisconnected = false;
    // Paused: the overlay says so and no input leaves this page (its stream stays open).
    this.paused = false;
    window.relaydeskViewer = this.info;
    // Named after the session: the chat's "Open viewer" finds this tab instead of opening one.
    window.name = `relaydesk-viewer-${sid}`;
    this.control = createControl({ viewer: this, grant: grantOf(token) || {}, sid });
    this.useToken(token);
    this.toolbar = createToolbar({ viewer: this, grant: grantOf(token) });
  }

  useToken(token) {
    this.token = token;
    this.url = socketUrl(window.location, this.sid, token);
    const path = `/vnc/${this.sid}/${token}/`;
    if (window.location.pathname !== path) {
      window.history.replaceState(null, "", path + window.location.search);
    }
    this.control.follow(token);
    const grant = grantOf(token);
    clearTimeout(this.refreshTimer);
    if (grant && Number.isFinite(grant.e)) {
      const dueS = Math.max(REFRESH_MIN_S, grant.e - Date.now() / 1000 - REFRESH_AHEAD_S);
      this.refreshTimer = setTimeout(() => this.refresh(), dueS * 1000);
    }
  }

  async refresh() {
    const fresh = await refreshToken(this.sid, this.token);
    if (fresh) {
      this.info.refreshes += 1;
      this.useToken(fresh);
    }
    return Boolean(fresh);
  }

  setState(state, text) {
    this.info.state = state;
    document.body.dataset.state = state;
    document.getElementById("status").textContent = text;
  }

  connect() {
    this.timer = null;
    this.userDisconnected = false;
    // A paused desktop's page keeps saying so while it asks again.
    if (this.info.state !== "paused") {
      this.setState("connecting", this.attempt ? "Reconnecting…" : "Connecting…");
    }
    const socket = new WebSocket(this.url, ["binary"]);
    socket.addEventListener("close", (event) => this.closed(event));
    const rfb = new RFB(this.screen, socket, { shared: true });
    rfb.scaleViewport = true;
    rfb.resizeSession = false;
    rfb.focusOnClick = true;
    const started = performance.now();
    rfb.addEventListener("connect", () => {
      this.attempt = 0;
      document.getElementById("overlay").hidden = true;
      this.paused = false;  // admitted: the desktop runs
      rfb.viewOnly = this.control.state.viewOnly;
      if (this.rfb === rfb) this.setState("loading", "Loading the picture…");
    });
    onFirstPicture(rfb, () => {
      if (this.rfb !== rfb || this.userDisconnected) return;
      this.info.connects += 1;
      this.info.firstPictureMs = Math.round(performance.now() - started);
      this.setState("connected", "Connected");
    });
    this.rfb = rfb;
    this.toolbar.attach(rfb);
    this.control.attach(rfb);
    installBridge(rfb, {
      keyboardStateUrl: new URL("keyboard-state", window.location.href).href,
      clipboardUrl: new URL("clipboard", window.location.href).href,
      clipboardImageUrl: new URL("clipboard-image", window.location.href).href,
      canvasContainer: this.screen,
    });
  }

  // The toolbar's Disconnect: this viewer only; the desktop keeps running.
  disconnectByUser() {
    this.userDisconnected = true;
    clearTimeout(this.timer);
    this.timer = null;
    if (this.rfb) this.rfb.disconnect();
    this.setState("disconnected", "Disconnected");
    this.showOverlay("Disconnected", "This viewer is disconnected. The desktop keeps running.", true);
  }

  reconnectByUser() {
    document.getElementById("overlay").hidden = true;
    this.attempt = 0;
    this.connect();
  }

  async closed(event) {
    this.info.lastClose = { code: event.code, reason: event.reason };
    if (this.userDisconnected) return;
    if (event.code === CLOSE.VIEWER_EXPIRED && (await this.refresh())) {
      this.connect();
      return;
    }
    if (event.code === CLOSE.DESKTOP_PAUSED) {
      this.showPaused();
      this.timer = setTimeout(() => this.connect(), PAUSED_RETRY_S * 1000);
      return;
    }
    if (event.code === CLOSE.DESKTOP_STOPPED) {
      this.setState("reconnecting", "Desktop stopped — looking for its successor");
      const next = await successorUrl(this.sid, this.token);
      if (next) {  // reset in place: the same slot's new desktop, in this tab
        window.location.replace(new URL(next, window.location.href).href);
        return;
      }
    }
    const final = FINAL.get(event.code);
    if (final) {
      clearTimeout(this.refreshTimer);
      const [state, title, text] = final;
      this.setState(state, title);
      this.showOverlay(title, text);
      return;
    }
    const delay = Math.min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** this.attempt);
    this.attempt += 1;
    const why = event.code === CLOSE.RELAY_UNREACHABLE ? "Relay unreachable" : "Disconnected";
    this.setState(
      event.code === CLOSE.RELAY_UNREACHABLE ? "unreachable" : "reconnecting",
      `${why} — retrying in ${delay.toFixed(1)} s`,
    );
    // Jitter keeps many viewers of one desktop from reconnecting in lockstep.
    this.timer = setTimeout(() => this.connect(), delay * (0.75 + Math.random() * 0.5) * 1000);
  }

  showPaused() {
    this.paused = true;
    this.setState("paused", PAUSED[0]);
    this.showOverlay(...PAUSED);
  }

  // The control feed's desktop_state: paused, or running again.
  desktopState(state) {
    const paused = state === "paused";
    if (paused === this.paused) return;
    if (this.rfb) this.rfb.viewOnly = paused || this.control.state.viewOnly;
    if (paused) {
      this.showPaused();
      return;
    }
    this.paused = false;
    document.getElementById("overlay").hidden = true;
    if (this.timer) {  // refused while paused: ask again now
      clearTimeout(this.timer);
      this.attempt = 0;
      this.connect();
    } else {
      this.setState("connected", "Connected");
    }
  }

  showOverlay(title, text, canReconnect = false) {
    document.getElementById("overlay-title").textContent = title;
    document.getElementById("overlay-text").textContent = text;
    document.getElementById("overlay-reconnect").hidden = !canReconnect;
    document.getElementById("overlay").hidden = false;
    if (canReconnect) document.getElementById("overlay-reconnect").focus();
  }
}

const session = sessionFromPath(window.location.pathname);
if (session) {
  new Viewer(document.getElementById("screen"), session.sid, session.token).connect();
} else {
  document.getElementById("status").textContent = "Not a viewer address";
}
