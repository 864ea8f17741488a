// The viewer's "local feel" bridge: what a local desktop gives and a plain noVNC page does not.
//
//   * remote clipboard → browser clipboard (noVNC's "clipboard" event → navigator.clipboard),
//     except the text this page itself just sent;
//   * browser paste → remote clipboard: Ctrl+V (or Cmd+V) is kept from noVNC so the browser
//     fires its native "paste" event; its text goes to the remote with clipboardPasteFrom and
//     is read back from clipboardUrl until the desktop's CLIPBOARD holds it (x11vnc only
//     writes the cut buffer, which the desktop's autocutsel then copies). Only then the V press
//     is sent, so the remote application pastes the text of that moment; every key event that
//     comes meanwhile is held and replayed in order after it;
//   * held repeatable keys: the browser's auto-repeat keydowns become release+press pairs,
//     which the X server delivers as repeated key events (x11vnc turns server auto-repeat off);
//   * NumLock: before the first key press, and again after focus returns, the remote LED is
//     read from keyboardStateUrl; when both states are known and differ, exactly one NumLock
//     press is sent. Key events that arrive meanwhile are held and replayed in order. When
//     either state is unknown nothing is sent (no guessing);
//   * benign "ResizeObserver loop" errors never reach noVNC's fatal error handler;
//   * a pasted PNG image (a paste with an image and no text) goes to the desktop's CLIPBOARD
//     through clipboardImageUrl before the V press (clipimage.js);
//   * `/desktop close` in the chat (a BroadcastChannel message) closes this viewer tab only.
//
// installBridge(rfb, {keyboardStateUrl, clipboardUrl, clipboardImageUrl, canvasContainer})
// → {uninstall}. Call it for every new RFB (the viewer reconnects with a new one); the
// previous installation removes itself when its RFB disconnects.

import {
  LOCAL_IMAGE_WRITTEN, pastedImage, putClipboardImage, readClipboardPng,
} from "/viewer/clipimage.js";

const XK_NUM_LOCK = 0xff7f;
const STATE_TIMEOUT_MS = 1500;
// A Ctrl+V's own "paste" event follows its keydown at once; without one (an empty clipboard,
// or a browser that fires none) the text is read through the async clipboard API.
const PASTE_EVENT_WAIT_MS = 250;
// Reading the desktop's clipboard back: how often, and for how long at most before the V
// press goes out anyway. Without a way to read it, this long is waited instead.
const CONFIRM_POLL_MS = 40;
const CONFIRM_TIMEOUT_MS = 3000;
const UNCONFIRMED_WAIT_MS = 300;
// The desktop's copy of a text this page pasted, coming back this soon, is not written over
// the person's clipboard (they hold it already, or something newer).
const ECHO_WINDOW_MS = 3000;
const CLOSE_CHANNEL = "relaydesk-viewers";
const MODIFIER_CODES = new Set(["ShiftLeft", "ShiftRight", "ControlLeft", "ControlRight",
  "AltLeft", "AltRight", "MetaLeft", "MetaRight", "CapsLock", "NumLock", "ScrollLock",
  "OSLeft", "OSRight", "AltGraph"]);
const LOCK_MODIFIERS = ["CapsLock", "NumLock", "ScrollLock", "AltGraph"];
const isMac = /Mac|iPhone|iPad/.test(navigator.platform || "");

// Shared across installations: page-wide, installed once.
let pageHooksInstalled = false;
function installPageHooks() {
  if (pageHooksInstalled) return;
  pageHooksInstalled = true;
  window.addEventListener("error", (event) => {
    if (/ResizeObserver loop/.test(event.message || "")) {
      event.stopImmediatePropagation();
      event.preventDefault();
    }
  }, true);
  if ("BroadcastChannel" in window) {
    const channel = new BroadcastChannel(CLOSE_CHANNEL);
    channel.addEventListener("message", (event) => {
      if (event.data && event.data.type === "close") window.close();
    });
  }
}

export const stats = { numLockPresses: 0, aligns: [], pastes: 0, repeats: 0, clipboardWrites: 0,
  pasteConfirms: [], pasteWaitsMs: [], echoesIgnored: 0, binaryIgnored: 0, imagePastes: [] };

// Control characters no text holds (tab, line breaks, form feed and escape aside): a desktop
// clipboard that holds an image answers x11vnc's request for text with the image's bytes
// (cut at the first NUL: "\x89PNG\r\n\x1a\n"), which is not text to put on anyone's clipboard.
const NOT_TEXT = /[\x00-\x08\x0e-\x1a\x1c-\x1f]/;

const sleep = (ms) => new Promise((resolve) => { setTimeout(resolve, ms); });

// What the desktop receives of `text`: without the extended clipboard (x11vnc has none) noVNC
// sends ISO 8859-1 and replaces every other character with "?".
export function asSentToDesktop(text) {
  return [...text].map((char) => (char.codePointAt(0) > 0xff ? "?" : char)).join("");
}

function browserNumLock(event) {
  if (isMac || typeof event.getModifierState !== "function") return null;
  const value = event.getModifierState("NumLock");
  return typeof value === "boolean" ? value : null;
}

function cloneKeyEvent(event, type = event.type) {
  const init = {
    key: event.key, code: event.code, location: event.location, repeat: event.repeat,
    ctrlKey: event.ctrlKey, shiftKey: event.shiftKey, altKey: event.altKey,
    metaKey: event.metaKey, bubbles: true, cancelable: true, composed: true,
  };
  for (const name of LOCK_MODIFIERS) {
    if (typeof event.getModifierState === "function") {
      init[`modifier${name}`] = event.getModifierState(name);
    }
  }
  return new KeyboardEvent(type, init);
}

function keysymOfChar(key) {
  if (!key || [...key].length !== 1) return null;
  const codePoint = key.codePointAt(0);
  if (codePoint >= 0x20 && codePoint <= 0xff) return codePoint;
  return 0x01000000 | codePoint;
}

// One field of a viewer state endpoint's answer (keyboard-state, clipboard): the field when the
// answer says it is known and the field is of `type`; null when it cannot be read (refused, the
// relay failed, or too slow).
async function readKnownField(url, field, type, fetchImpl) {
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), STATE_TIMEOUT_MS);
  try {
    const response = await fetchImpl(url, {
      cache: "no-store", credentials: "same-origin", signal: abort.signal,
    });
    if (!response.ok) return null;
    const body = await response.json();
    return body && body.known === true && typeof body[field] === type ? body[field] : null;
  } catch {
    return null;
  } finally {
    clearTimeout(timer);
  }
}

export async function readKeyboardState(url, fetchImpl = fetch) {
  return readKnownField(url, "num_lock", "boolean", fetchImpl);
}

// The desktop's CLIPBOARD text from the viewer's clipboard endpoint; null when it cannot be
// read (no endpoint, refused, the relay failed, or too slow).
export async function readDesktopClipboard(url, fetchImpl = fetch) {
  return url ? readKnownField(url, "text", "string", fetchImpl) : null;
}

// The browser clipboard's text through the async API, or "" (no API, refused, or too slow);
// without text, its PNG image as {image} when it holds one (clipimage.js).
function readClipboardPaste() {
  return readClipboardText().then(async (text) => {
    if (text) return text;
    const image = await readClipboardPng(STATE_TIMEOUT_MS);
    return image ? { image } : "";
  });
}

function readClipboardText() {
  if (!navigator.clipboard || typeof navigator.clipboard.readText !== "function") {
    return Promise.resolve("");
  }
  let timer;
  const late = new Promise((resolve) => { timer = setTimeout(() => resolve(""), STATE_TIMEOUT_MS); });
  return Promise.race([navigator.clipboard.readText().catch(() => ""), late])
    .finally(() => clearTimeout(timer));
}

class Bridge {
  constructor(rfb, { keyboardStateUrl, clipboardUrl, clipboardImageUrl, canvasContainer,
    fetchImpl }) {
    this.rfb = rfb;
    this.url = keyboardStateUrl;
    this.clipboardUrl = clipboardUrl;
    this.clipboardImageUrl = clipboardImageUrl;
    this.container = canvasContainer;
    this.fetchImpl = fetchImpl || ((...args) => window.fetch(...args));
    this.needAlign = true;
    this.held = null;           // key events held while the remote state is read
    this.replayed = new WeakSet();
    this.paste = null;          // {keysym, code, sent, fromEvent} from a Ctrl+V to its V release
    this.pendingRemoteText = null;
    this.sent = null;           // {text, at}: the last text sent to the desktop, and when
    this.listeners = [];
  }

  listen(target, type, handler, options) {
    target.addEventListener(type, handler, options);
    this.listeners.push(() => target.removeEventListener(type, handler, options));
  }

  install() {
    installPageHooks();
    const key = (event) => this.onKey(event);
    this.listen(this.container, "keydown", key, true);
    this.listen(this.container, "keyup", key, true);
    this.listen(document, "paste", (event) => this.onPaste(event), true);
    this.listen(window, "focus", () => this.focusReturned());
    this.listen(document, "visibilitychange", () => {
      if (document.visibilityState === "visible") this.focusReturned();
    });
    this.listen(this.rfb, "clipboard", (event) => this.remoteClipboard(event.detail.text));
    this.listen(window, LOCAL_IMAGE_WRITTEN, () => { this.pendingRemoteText = null; });
    this.listen(this.rfb, "disconnect", () => this.uninstall());
    return this;
  }

  uninstall() {
    for (const remove of this.listeners.splice(0)) remove();
    this.held = null;
  }

  focusReturned() {
    this.needAlign = true;
    if (this.pendingRemoteText !== null) this.remoteClipboard(this.pendingRemoteText);
  }

  // -- clipboard ------------------------------------------------------------------------

  async remoteClipboard(text) {
    // An empty text says nothing (the desktop's clipboard may hold an image instead): it
    // never clears what the person's clipboard holds; nor do an image's bytes sent as text.
    if (typeof text !== "string" || text === "" || !navigator.clipboard) return;
    if (NOT_TEXT.test(text)) {
      stats.binaryIgnored += 1;
      return;
    }
    if (this.sent && text === this.sent.text && performance.now() - this.sent.at < ECHO_WINDOW_MS) {
      stats.echoesIgnored += 1;
      return;
    }
    try {
      await navigator.clipboard.writeText(text);
      this.pendingRemoteText = null;
      stats.clipboardWrites += 1;
    } catch {
      // Not focused (or not allowed) now: write it when focus returns.
      this.pendingRemoteText = text;
    }
  }

  isPasteChord(event) {
    return event.type === "keydown" && event.code === "KeyV" && !event.altKey &&
      (isMac ? event.metaKey : event.ctrlKey) && !event.repeat;
  }

  newPaste(event) {
    this.paste = { keysym: keysymOfChar(event.key) || 0x76, code: event.code, sent: false,
      fromEvent: null };
    return this.paste;
  }

  // A live Ctrl+V: hidden from noVNC but not prevented, so the browser fires "paste". The
  // events after it are held until the desktop holds the text and V is pressed.
  startPaste(event) {
    event.stopImmediatePropagation();
    const paste = this.newPaste(event);
    this.held = [];
    const fromEvent = new Promise((resolve) => { paste.fromEvent = resolve; });
    const text = Promise.race([fromEvent, sleep(PASTE_EVENT_WAIT_MS).then(() => null)])
      .then((got) => (got === null ? readClipboardPaste() : got));
    this.deliverPaste(paste, text).finally(() => this.replayAll());
  }

  onPaste(event) {
    const paste = this.paste;
    const ours = paste && paste.fromEvent && !paste.sent;
    if (!ours && !this.container.contains(event.target)) return;  // e.g. the clipboard panel
    const text = event.clipboardData ? event.clipboardData.getData("text/plain") : "";
    const image = text ? null : pastedImage(event.clipboardData);
    event.preventDefault();
    if (ours) paste.fromEvent(image ? { image } : text);
    else if (image) this.setRemoteImage(image);
    else if (text) this.setRemoteClipboard(text);
  }

  // The person's text (or image) → the desktop's CLIPBOARD (text read back until it holds
  // it; an image once the server has set it) → V pressed.
  async deliverPaste(paste, textPromise) {
    const got = await textPromise;
    if (got && typeof got === "object") {
      if (this.paste === paste) await this.setRemoteImage(got.image);
    } else if (got && this.paste === paste) {
      await this.setRemoteClipboard(got);
    }
    if (this.paste === paste) this.sendPasteKeyDown();
  }

  async setRemoteImage(image) {
    if (!this.clipboardImageUrl) return;
    const sent = await putClipboardImage(this.clipboardImageUrl, image, this.fetchImpl);
    stats.imagePastes.push(sent.ok ? "sent" : sent.message);
  }

  async setRemoteClipboard(text) {
    this.pendingRemoteText = null;  // the person's clipboard wins over an unwritten remote copy
    this.sent = { text, at: performance.now() };
    this.rfb.clipboardPasteFrom(text);
    stats.pastes += 1;
    const started = performance.now();
    stats.pasteConfirms.push(await this.confirmRemote(asSentToDesktop(text)));
    stats.pasteWaitsMs.push(Math.round(performance.now() - started));
  }

  // "confirmed" once the desktop's CLIPBOARD reads `want`; "timeout" after CONFIRM_TIMEOUT_MS;
  // "unconfirmed" when it cannot be read (then after a fixed wait).
  async confirmRemote(want) {
    const deadline = performance.now() + CONFIRM_TIMEOUT_MS;
    for (;;) {
      const got = await readDesktopClipboard(this.clipboardUrl, this.fetchImpl);
      if (got === null) {
        await sleep(UNCONFIRMED_WAIT_MS);
        return "unconfirmed";
      }
      if (got === want) return "confirmed";
      if (performance.now() >= deadline) return "timeout";
      await sleep(CONFIRM_POLL_MS);
    }
  }

  sendPasteKeyDown() {
    if (!this.paste || this.paste.sent) return;
    this.paste.sent = true;
    this.rfb.sendKey(this.paste.keysym, this.paste.code, true);
  }

  // The V release of a paste already delivered (V was held down past it).
  endPaste(event) {
    event.stopImmediatePropagation();
    event.preventDefault();
    this.sendPasteKeyDown();
    this.rfb.sendKey(this.paste.keysym, this.paste.code, false);
    this.paste = null;
  }

  // -- keys -----------------------------------------------------------------------------

  onKey(event) {
    if (this.replayed.has(event)) return;
    if (this.held !== null) {
      this.hold(event);
      return;
    }
    if (event.type === "keydown" && this.needAlign) {
      this.needAlign = false;
      this.hold(event);
      this.align(event);
      return;
    }
    this.route(event);
  }

  // What this key event means for the bridge: "paste-start", "paste-end", "repeat" or "pass".
  classify(event) {
    if (this.paste && event.type === "keyup" && event.code === this.paste.code) return "paste-end";
    if (this.isPasteChord(event)) return "paste-start";
    if (event.type === "keydown" && event.repeat && !MODIFIER_CODES.has(event.code)) return "repeat";
    return "pass";
  }

  route(event) {
    const kind = this.classify(event);
    if (kind === "paste-end") this.endPaste(event);
    else if (kind === "paste-start") this.startPaste(event);
    else if (kind === "repeat") this.releaseBeforeRepeat(event, event.target);
  }

  // An auto-repeat: release first, so the remote sees a new press (see the module comment).
  releaseBeforeRepeat(event, target) {
    this.replay(cloneKeyEvent(event, "keyup"), target);
    stats.repeats += 1;
  }

  hold(event) {
    event.stopImmediatePropagation();
    event.preventDefault();
    this.held = this.held || [];
    this.held.push({ event, target: event.target });
  }

  async align(first) {
    const local = first.code === "NumLock" ? null : browserNumLock(first);
    const remote = local === null ? null : await readKeyboardState(this.url, this.fetchImpl);
    const record = { local, remote, sent: false };
    if (local !== null && remote !== null && local !== remote) {
      this.rfb.sendKey(XK_NUM_LOCK, "NumLock", true);
      this.rfb.sendKey(XK_NUM_LOCK, "NumLock", false);
      stats.numLockPresses += 1;
      record.sent = true;
    }
    stats.aligns.push(record);
    await this.replayAll();
  }

  // Replays the held events in order. A paste chord waits for its clipboard read, and the
  // events behind it (its own V release, the Ctrl release) stay held until the text is sent:
  // else the remote would get V before the text, or a bare "v" after Ctrl was released.
  async replayAll() {
    while (this.held !== null && this.held.length > 0) {
      const { event, target } = this.held.shift();
      const pending = this.replayHeld(event, target);
      if (pending) await pending;
    }
    this.held = null;
  }

  // A held event cannot trigger the browser's native paste any more: read the clipboard
  // through the async API instead (bounded: it may ask for permission; without the text only
  // V is sent). Returns a promise while the paste is delivered.
  replayHeld(event, target) {
    const kind = this.classify(event);
    if (kind === "paste-start") return this.deliverPaste(this.newPaste(event), readClipboardPaste());
    if (kind === "paste-end") {
      this.sendPasteKeyDown();
      this.rfb.sendKey(this.paste.keysym, this.paste.code, false);
      this.paste = null;
      return;
    }
    if (kind === "repeat") this.releaseBeforeRepeat(event, target);
    this.replay(cloneKeyEvent(event), target);
  }

  replay(event, target) {
    this.replayed.add(event);
    (target || this.container).dispatchEvent(event);
  }
}

export function installBridge(
  rfb, { keyboardStateUrl, clipboardUrl, clipboardImageUrl, canvasContainer, fetchImpl } = {},
) {
  const bridge = new Bridge(rfb, { keyboardStateUrl, clipboardUrl, clipboardImageUrl,
    canvasContainer, fetchImpl }).install();
  window.relaydeskBridge = stats;
  return { uninstall: () => bridge.uninstall(), bridge };
}
