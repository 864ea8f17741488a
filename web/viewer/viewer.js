// relaydesk's viewer page: noVNC's RFB over the server's viewer WebSocket.
//
// The page learns the desktop session and its capability token from its own path
// (/vnc/{sid}/{token}/) and builds the WebSocket URL from the origin, so it works under any
// page path. The server closes refused or ended streams with one of the codes below; final
// ones show the overlay, the others reconnect with backoff while the desktop runs.
import RFB from "/novnc/core/rfb.js";
import { installBridge } from "/viewer/bridge.js";

export const CLOSE = Object.freeze({
  UNKNOWN_SESSION: 4404,
  VIEWER_EXPIRED: 4401,
  VIEWER_FORBIDDEN: 4403,
  RELAY_UNREACHABLE: 4502,
  DESKTOP_STOPPED: 4410,
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
const BACKOFF_MAX_S = 8;

export function sessionFromPath(pathname) {
  const match = /^\/vnc\/([^/]+)\/([^/]+)\/?/.exec(pathname);
  return match ? { sid: match[1], token: match[2] } : null;
}

export function socketUrl(location, sid, token) {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  return `${scheme}//${location.host}/vnc/${sid}/${token}/websockify`;
}

// ResizeObserver "loop" notices are benign; noVNC must never treat them as fatal.
window.addEventListener("error", (event) => {
  if (/ResizeObserver loop/.test(event.message || "")) {
    event.stopImmediatePropagation();
    event.preventDefault();
  }
}, true);

class Viewer {
  constructor(screen, url) {
    this.screen = screen;
    this.url = url;
    this.rfb = null;
    this.attempt = 0;
    this.timer = null;
    this.info = { state: "connecting", connects: 0, lastClose: null };
    window.relaydeskViewer = this.info;
  }

  setState(state, text) {
    this.info.state = state;
    document.body.dataset.state = state;
    document.getElementById("status").textContent = text;
  }

  connect() {
    this.timer = null;
    this.setState("connecting", this.attempt ? "Reconnecting…" : "Connecting…");
    const socket = new WebSocket(this.url, ["binary"]);
    socket.addEventListener("close", (event) => this.closed(event));
    const rfb = new RFB(this.screen, socket, { shared: true });
    rfb.scaleViewport = true;
    rfb.resizeSession = false;
    rfb.focusOnClick = true;
    rfb.addEventListener("connect", () => {
      this.attempt = 0;
      this.info.connects += 1;
      this.setState("connected", "Connected");
    });
    this.rfb = rfb;
    installBridge(rfb, {
      keyboardStateUrl: new URL("keyboard-state", window.location.href).href,
      canvasContainer: this.screen,
    });
  }

  closed(event) {
    this.info.lastClose = { code: event.code, reason: event.reason };
    const final = FINAL.get(event.code);
    if (final) {
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

  showOverlay(title, text) {
    document.getElementById("overlay-title").textContent = title;
    document.getElementById("overlay-text").textContent = text;
    document.getElementById("overlay").hidden = false;
  }
}

const session = sessionFromPath(window.location.pathname);
if (session) {
  new Viewer(document.getElementById("screen"),
    socketUrl(window.location, session.sid, session.token)).connect();
} else {
  document.getElementById("status").textContent = "Not a viewer address";
}
