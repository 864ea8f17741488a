// The viewer's toolbar: back to the chat, special keys, a clipboard panel, an on-screen
// keyboard (touch screens), pan & zoom, scaling and picture quality, full screen, disconnect.
//
// createToolbar({viewer, grant}) → {attach(rfb)}. The viewer calls attach for every new RFB
// (it reconnects with a new one); the chosen scaling and quality are applied to each and kept
// in localStorage. Pan & zoom lives in zoom.js.
import { createZoom } from "/viewer/zoom.js";
import { wireClipboardImages } from "/viewer/clipimage.js";

const STORAGE_KEY = "relaydesk.viewer.settings";
const XK = Object.freeze({
  Control_L: 0xffe3, Alt_L: 0xffe9, Super_L: 0xffeb, Tab: 0xff09, Escape: 0xff1b,
  F4: 0xffc1, Print: 0xff61, BackSpace: 0xff08, Return: 0xff0d, Delete: 0xffff,
});
const CODES = {
  [XK.Control_L]: "ControlLeft", [XK.Alt_L]: "AltLeft", [XK.Super_L]: "MetaLeft",
  [XK.Tab]: "Tab", [XK.Escape]: "Escape", [XK.F4]: "F4", [XK.Print]: "PrintScreen",
  [XK.BackSpace]: "Backspace", [XK.Return]: "Enter", [XK.Delete]: "Delete",
};
// menu entry → keysyms pressed in order and released in reverse
export const KEY_COMBOS = Object.freeze({
  "ctrl-alt-del": [XK.Control_L, XK.Alt_L, XK.Delete],
  "alt-tab": [XK.Alt_L, XK.Tab],
  "alt-f4": [XK.Alt_L, XK.F4],
  super: [XK.Super_L],
  "ctrl-esc": [XK.Control_L, XK.Escape],
  esc: [XK.Escape],
  tab: [XK.Tab],
  print: [XK.Print],
});
// picture quality → noVNC's JPEG quality (0–9) and zlib compression (0–9)
export const QUALITY = Object.freeze({
  high: { quality: 8, compression: 1 },
  balanced: { quality: 6, compression: 2 },
  low: { quality: 2, compression: 8 },
});
const DEFAULTS = { scaling: "fit", quality: "balanced" };

const byId = (id) => document.getElementById(id);

function loadSettings() {
  try {
    const saved = JSON.parse(localStorage.getItem(STORAGE_KEY) || "{}");
    return {
      scaling: ["fit", "actual", "remote"].includes(saved.scaling) ? saved.scaling : DEFAULTS.scaling,
      quality: saved.quality in QUALITY ? saved.quality : DEFAULTS.quality,
    };
  } catch {
    return { ...DEFAULTS };
  }
}

function saveSettings(settings) {
  try {
    localStorage.setItem(STORAGE_KEY, JSON.stringify(settings));
  } catch {
    /* private mode: the settings last for this page only */
  }
}

export function keysymOfChar(char) {
  const codePoint = char.codePointAt(0);
  if (codePoint >= 0x20 && codePoint <= 0xff) return codePoint;
  return 0x01000000 | codePoint;
}

// noVNC learns that the server can resize its desktop (ExtendedDesktopSize) from the first
// update; there is no public getter in noVNC 1.7 (pinned in web/package.json).
function canResizeRemote(rfb) {
  return Boolean(rfb && rfb._supportsSetDesktopSize);
}

class Toolbar {
  constructor({ viewer, grant }) {
    this.viewer = viewer;
    this.rfb = null;
    this.settings = loadSettings();
    this.stats = { keysSent: [], clipboardSent: 0, scaling: this.settings.scaling,
      quality: this.settings.quality };
    window.relaydeskToolbar = this.stats;
    this.zoom = createZoom({ screen: byId("screen"), button: byId("zoom"),
      onChange: (on) => this.zoomChanged(on) });
    if (grant && grant.c) byId("back").href = `/#/c/${encodeURIComponent(grant.c)}`;
    byId("overlay-back").href = byId("back").href;
    this.wirePopovers();
    this.wireKeys();
    this.wireClipboard();
    this.wireKeyboard();
    this.wireSettings();
    this.wireFullscreen();
    this.wireFit(grant);
    byId("disconnect").addEventListener("click", () => this.viewer.disconnectByUser());
    byId("overlay-reconnect").addEventListener("click", () => this.viewer.reconnectByUser());
  }

  attach(rfb) {
    this.rfb = rfb;
    this.applyQuality();
    this.applyScaling();
    rfb.addEventListener("clipboard", (event) => { byId("clipboard-text").value = event.detail.text; });
    rfb.addEventListener("connect", () => this.refreshScalingChoices());
    this.zoom.attach(rfb);
  }

  // -- popovers ---------------------------------------------------------------------------

  wirePopovers() {
    const pairs = [["keys-button", "keys-menu"], ["clipboard-button", "clipboard-panel"],
      ["settings-button", "settings-panel"], ["control", "control-panel"]];
    this.popovers = pairs.map(([button, panel]) => [byId(button), byId(panel)]);
    for (const [button, panel] of this.popovers) {
      button.addEventListener("click", () => this.toggle(panel, panel.hidden));
    }
    document.addEventListener("keydown", (event) => {
      if (event.key === "Escape" && this.openPopover()) {
        this.closePopovers();
        event.preventDefault();
      }
    });
    document.addEventListener("pointerdown", (event) => {
      if (!event.target.closest(".group")) this.closePopovers();
    });
    window.addEventListener("resize", () => {
      for (const [, panel] of this.popovers) if (!panel.hidden) this.keepInside(panel);
    });
  }

  openPopover() {
    return this.popovers.some(([, panel]) => !panel.hidden);
  }

  toggle(panel, open) {
    this.closePopovers(panel);
    panel.hidden = !open;
    const button = this.popovers.find(([, p]) => p === panel)[0];
    button.setAttribute("aria-expanded", String(open));
    if (open) {
      this.keepInside(panel);
      panel.querySelector("button, textarea, select")?.focus();
    }
  }

  // A panel hangs from its button; where the bar has wrapped (or the window is narrow) it is
  // moved sideways so that it stays whole inside the window.
  keepInside(panel) {
    panel.style.transform = "";
    const margin = 6;
    const box = panel.getBoundingClientRect();
    const width = document.documentElement.clientWidth;
    let shift = 0;
    if (box.right > width - margin) shift = width - margin - box.right;
    if (box.left + shift < margin) shift = margin - box.left;
    if (shift) panel.style.transform = `translateX(${Math.round(shift)}px)`;
  }

  closePopovers(except = null) {
    for (const [button, panel] of this.popovers) {
      if (panel === except) continue;
      panel.hidden = true;
      button.setAttribute("aria-expanded", "false");
    }
  }

  // -- special keys -----------------------------------------------------------------------

  wireKeys() {
    for (const item of byId("keys-menu").querySelectorAll("[data-keys]")) {
      item.addEventListener("click", () => {
        this.sendCombo(item.dataset.keys);
        this.closePopovers();
        this.rfb?.focus();
      });
    }
  }

  sendCombo(name) {
    const keys = KEY_COMBOS[name];
    if (!keys || !this.rfb) return;
    for (const keysym of keys) this.rfb.sendKey(keysym, CODES[keysym], true);
    for (const keysym of [...keys].reverse()) this.rfb.sendKey(keysym, CODES[keysym], false);
    this.stats.keysSent.push(name);
  }

  // -- clipboard --------------------------------------------------------------------------

  wireClipboard() {
    byId("clipboard-send").addEventListener("click", () => {
      const text = byId("clipboard-text").value;
      if (!this.rfb || !text) return;
      this.rfb.clipboardPasteFrom(text);
      this.stats.clipboardSent += 1;
      this.closePopovers();
      this.rfb.focus();
    });
    byId("clipboard-clear").addEventListener("click", () => {
      byId("clipboard-text").value = "";
      byId("clipboard-text").focus();
    });
    wireClipboardImages({ url: new URL("clipboard-image", window.location.href).href,
      sendButton: byId("clipboard-image-send"), getButton: byId("clipboard-image-get"),
      preview: byId("clipboard-image"), status: byId("clipboard-image-status") });
  }

  // -- on-screen keyboard: a focused text field opens the phone's keyboard; what is typed
  //    there goes to the desktop as key presses and the field stays empty ------------------

  wireKeyboard() {
    const input = byId("keyboard-input");
    byId("keyboard").addEventListener("click", () => {
      input.value = "";
      input.focus();
    });
    input.addEventListener("beforeinput", (event) => {
      event.preventDefault();
      this.typed(event.inputType, event.data);
    });
    input.addEventListener("input", () => {
      // Keyboards whose input cannot be cancelled (some IMEs): send what arrived.
      if (input.value) this.typed("insertText", input.value);
      input.value = "";
    });
    input.addEventListener("keydown", (event) => {
      const special = { Enter: XK.Return, Backspace: XK.BackSpace, Tab: XK.Tab, Escape: XK.Escape };
      if (special[event.key] !== undefined && !event.isComposing) {
        event.preventDefault();
        this.tap(special[event.key]);
      }
    });
  }

  typed(inputType, data) {
    if (inputType === "insertLineBreak" || inputType === "insertParagraph") this.tap(XK.Return);
    else if (inputType === "deleteContentBackward") this.tap(XK.BackSpace);
    else if (data) for (const char of data) this.tap(keysymOfChar(char));
  }

  tap(keysym) {
    if (!this.rfb) return;
    this.rfb.sendKey(keysym, CODES[keysym] || null, true);
    this.rfb.sendKey(keysym, CODES[keysym] || null, false);
  }

  // -- scaling and quality ----------------------------------------------------------------

  wireSettings() {
    const scaling = byId("scaling");
    const quality = byId("quality");
    scaling.value = this.settings.scaling;
    quality.value = this.settings.quality;
    scaling.addEventListener("change", () => {
      this.settings.scaling = scaling.value;
      saveSettings(this.settings);
      this.zoom.reset();
      this.applyScaling();
    });
    quality.addEventListener("change", () => {
      this.settings.quality = quality.value;
      saveSettings(this.settings);
      this.applyQuality();
    });
  }

  applyScaling() {
    const rfb = this.rfb;
    if (!rfb) return;
    let mode = this.settings.scaling;
    if (mode === "remote" && rfb._rfbConnectionState === "connected" && !canResizeRemote(rfb)) {
      mode = "fit";
    }
    rfb.clipViewport = false;
    rfb.scaleViewport = mode === "fit";
    rfb.resizeSession = mode === "remote";
    document.body.dataset.scaling = mode;
    this.stats.scaling = mode;
  }

  refreshScalingChoices() {
    // Wait for the first update: it tells whether the desktop can be resized from here.
    setTimeout(() => {
      const allowed = canResizeRemote(this.rfb);
      const option = byId("scaling").querySelector("option[value='remote']");
      // x11vnc does not implement SetDesktopSize: the choice is hidden, not offered in vain.
      option.disabled = !allowed;
      option.hidden = !allowed;
      const note = byId("scaling-note");
      note.hidden = true;
      note.textContent = "";
      this.applyScaling();
    }, 500);
  }

  applyQuality() {
    if (!this.rfb) return;
    const { quality, compression } = QUALITY[this.settings.quality];
    this.rfb.qualityLevel = quality;
    this.rfb.compressionLevel = compression;
    this.stats.quality = this.settings.quality;
  }

  zoomChanged(on) {
    document.body.dataset.zoom = String(on);
    if (!on && this.zoom.scale() === null) this.applyScaling();
  }

  // -- fit the desktop to the window --------------------------------------------------------

  // Xvfb keeps the size it started with: fitting restarts the desktop at this window's size
  // (the server rounds it to a geometry the relay accepts), after the person confirms.
  wireFit(grant) {
    const button = byId("fit-desktop");
    const note = byId("fit-note");
    this.fitStats = { asked: null, geometry: null, error: null };
    this.stats.fit = this.fitStats;
    let armed = false;
    button.addEventListener("click", async () => {
      const screen = byId("screen");
      const size = { width: Math.floor(screen.clientWidth), height: Math.floor(screen.clientHeight) };
      if (!armed) {
        armed = true;
        note.hidden = false;
        note.textContent = `Restart the desktop at about ${size.width} × ${size.height}? `
          + "Programs running in it end; files in a kept home stay.";
        button.textContent = "Restart at this size";
        return;
      }
      armed = false;
      button.disabled = true;
      this.fitStats.asked = size;
      try {
        const body = await fitDesktop(grant, this.viewer.sid, size);
        this.fitStats.geometry = body.geometry;
        if (!body.restarted) {
          note.textContent = `The desktop is ${body.geometry} already.`;
        } else {
          note.textContent = `Restarted at ${body.geometry}.`;
          window.location.replace(body.viewer_url);
        }
      } catch (err) {
        this.fitStats.error = err.message;
        note.textContent = `Not restarted: ${err.message}`;
      }
      button.disabled = false;
      button.textContent = "Fit desktop to window";
    });
  }

  // -- full screen ------------------------------------------------------------------------

  wireFullscreen() {
    const button = byId("fullscreen");
    if (!document.fullscreenEnabled) button.hidden = true;
    button.addEventListener("click", async () => {
      try {
        if (document.fullscreenElement) await document.exitFullscreen();
        else await document.documentElement.requestFullscreen({ navigationUI: "hide" });
      } catch {
        /* refused by the browser: nothing changes */
      }
    });
    document.addEventListener("fullscreenchange", () => {
      button.setAttribute("aria-pressed", String(Boolean(document.fullscreenElement)));
    });
  }
}

async function fitDesktop(grant, sid, size) {
  const me = await fetch("/api/v1/me", { credentials: "same-origin", cache: "no-store" });
  if (!me.ok) throw new Error("sign in to the chat first");
  const { csrf_token: token } = await me.json();
  const response = await fetch("/api/v1/actions/desktop_fit", {
    method: "POST",
    credentials: "same-origin",
    headers: { "Content-Type": "application/json", "X-CSRF-Token": token || "" },
    body: JSON.stringify({ conversation_id: grant.c, relay: grant.r, desktop_session_id: sid,
      width: size.width, height: size.height }),
  });
  const body = await response.json();
  if (!response.ok) throw new Error(body?.error?.message || `error ${response.status}`);
  return body;
}

export function createToolbar(options) {
  return new Toolbar(options);
}
