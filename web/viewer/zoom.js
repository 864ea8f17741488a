// Pan & zoom for the viewer (phones first): while the mode is on, the picture is moved and
// zoomed and the desktop gets no input — one finger (or the mouse) drags the picture, two
// fingers pinch to zoom, the mouse wheel zooms. Turning the mode off keeps the zoom, so a
// person zooms in, turns the mode off and works on the enlarged picture; choosing a scaling
// mode resets it.
//
// noVNC 1.7 (pinned in web/package.json) has no public zoom: the picture's scale is its
// Display's `scale`, the same setter noVNC's own "fit" uses, so pointer coordinates stay right.
// Input is kept from noVNC by stopping the events on the screen element in the capture phase.

const MIN_SCALE = 0.1;
const MAX_SCALE = 5;
const STOPPED = ["mousedown", "mouseup", "mousemove", "click", "dblclick", "contextmenu",
  "touchstart", "touchmove", "touchend", "touchcancel", "wheel"];

class Zoom {
  constructor({ screen, button, onChange }) {
    Object.assign(this, { screen, button, onChange });
    this.rfb = null;
    this.on = false;
    this.custom = null; // the scale the person chose, or null (the scaling mode decides)
    this.pointers = new Map();
    this.gesture = null;
    this.stats = { pinches: 0, pans: 0 };
    window.relaydeskZoom = this.stats;
    button.addEventListener("click", () => this.toggle());
    const stop = (event) => {
      if (!this.on) return;
      event.stopPropagation();
      if (event.cancelable) event.preventDefault();
      if (event.type === "wheel") this.wheel(event);
    };
    for (const type of STOPPED) screen.addEventListener(type, stop, { capture: true, passive: false });
    for (const type of ["pointerdown", "pointermove", "pointerup", "pointercancel"]) {
      screen.addEventListener(type, (event) => this.pointer(event), { capture: true });
    }
    window.addEventListener("resize", () => setTimeout(() => this.reapply(), 0));
  }

  attach(rfb) {
    this.rfb = rfb;
    rfb.addEventListener("connect", () => setTimeout(() => this.reapply(), 0));
  }

  toggle(on = !this.on) {
    this.on = on;
    this.button.setAttribute("aria-pressed", String(on));
    this.screen.classList.toggle("zooming", on);
    this.pointers.clear();
    this.gesture = null;
    this.onChange(on);
  }

  reset() {
    this.custom = null;
    if (this.on) this.toggle(false);
  }

  scale() {
    return this.custom;
  }

  display() {
    return this.rfb && this.rfb._display;
  }

  viewport() {
    return this.rfb && this.rfb._screen;
  }

  currentScale() {
    return this.display()?.scale || 1;
  }

  setScale(scale, anchor) {
    const display = this.display();
    const view = this.viewport();
    if (!display || !view) return;
    const next = Math.min(MAX_SCALE, Math.max(MIN_SCALE, scale));
    const before = this.currentScale();
    const rect = view.getBoundingClientRect();
    const ax = anchor ? anchor.x - rect.left : rect.width / 2;
    const ay = anchor ? anchor.y - rect.top : rect.height / 2;
    const fx = (view.scrollLeft + ax) / before;
    const fy = (view.scrollTop + ay) / before;
    this.rfb.scaleViewport = false;
    this.rfb.clipViewport = false;
    display.scale = next;
    this.custom = next;
    view.scrollLeft = fx * next - ax;
    view.scrollTop = fy * next - ay;
  }

  reapply() {
    if (this.custom !== null && this.display()) this.setScale(this.custom);
  }

  wheel(event) {
    const factor = Math.exp(-event.deltaY / 300);
    this.setScale(this.currentScale() * factor, { x: event.clientX, y: event.clientY });
  }

  pointer(event) {
    if (!this.on) return;
    event.stopPropagation();
    if (event.type === "pointerdown") {
      this.pointers.set(event.pointerId, { x: event.clientX, y: event.clientY });
    } else if (event.type === "pointermove" && this.pointers.has(event.pointerId)) {
      this.moved(event);
    } else if (event.type === "pointerup" || event.type === "pointercancel") {
      this.pointers.delete(event.pointerId);
    }
    this.gesture = this.pointers.size === 2 ? this.pinchStart() : null;
  }

  pinchStart() {
    if (this.gesture) return this.gesture;
    const [a, b] = [...this.pointers.values()];
    return { distance: Math.hypot(a.x - b.x, a.y - b.y) || 1, scale: this.currentScale() };
  }

  moved(event) {
    const last = this.pointers.get(event.pointerId);
    const now = { x: event.clientX, y: event.clientY };
    this.pointers.set(event.pointerId, now);
    const view = this.viewport();
    if (!view) return;
    if (this.pointers.size === 1) {
      view.scrollLeft -= now.x - last.x;
      view.scrollTop -= now.y - last.y;
      this.stats.pans += 1;
      return;
    }
    if (this.pointers.size === 2) {
      const gesture = this.pinchStart();
      this.gesture = gesture;
      const [a, b] = [...this.pointers.values()];
      const distance = Math.hypot(a.x - b.x, a.y - b.y);
      const middle = { x: (a.x + b.x) / 2, y: (a.y + b.y) / 2 };
      this.setScale(gesture.scale * (distance / gesture.distance), middle);
      this.stats.pinches += 1;
    }
  }
}

export function createZoom(options) {
  return new Zoom(options);
}
