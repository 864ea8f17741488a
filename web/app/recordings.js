// The Recordings view of a conversation (docs/recording.md): its recordings, a player with a
// seek bar carrying the timeline's markers by kind, the event list beside it (a click seeks
// there), the agent's click points drawn over the video at their moment, and the periods a
// person had control shaded on the seek bar. Members only: the server answers 403 otherwise.
import { api } from "./api.js";
import { byId, el, formatTime, shortId } from "./dom.js";

const KIND_LABELS = {
  agent_action: "agent", refused: "refused", takeover: "takeover", hand_back: "hand back",
  grant: "grant", stop: "Stop", chat: "chat", lifecycle: "desktop", viewer: "viewer",
};
// How long a click point stays drawn after its moment.
const POINT_SHOWN_MS = 1500;

// Positions go through the CSSOM (the policy allows no style attributes).
function placed(node, styles) {
  Object.assign(node.style, styles);
  return node;
}

// What an accessibility or browser act was on: 'click button “Save”' (as text, never markup).
export function elementLabel(event) {
  if (!event.element) return "";
  const action = event.summary?.action ? `${event.summary.action} ` : "";
  const name = event.element.name ? ` “${event.element.name}”` : "";
  return `${action}${event.element.role}${name}`;
}

function duration(ms) {
  const s = Math.max(0, Math.round(ms / 1000));
  return `${Math.floor(s / 60)}:${String(s % 60).padStart(2, "0")}`;
}

export class Recordings {
  constructor() {
    this.panel = byId("recordings-panel");
    this.button = byId("recordings-button");
    this.video = byId("rec-video");
    this.conversationId = null;
    this.current = null;
    this.events = [];
    this.button.addEventListener("click", () => this.toggle());
    byId("recordings-close").addEventListener("click", () => this.toggle(false));
    this.video.addEventListener("timeupdate", () => this.drawPoints());
    this.video.addEventListener("seeked", () => this.drawPoints());
    this.video.addEventListener("loadedmetadata", () => this.drawTrack());
  }

  use(conversationId) {
    this.conversationId = conversationId;
    this.current = null;
    if (!this.panel.hidden) this.refresh();
  }

  base() {
    return `/api/v1/conversations/${encodeURIComponent(this.conversationId)}/recordings`;
  }

  toggle(open = this.panel.hidden) {
    this.panel.hidden = !open;
    this.button.setAttribute("aria-expanded", String(open));
    document.body.dataset.recordings = String(open);
    if (open) this.refresh();
    else this.video.pause();
  }

  async refresh() {
    const note = byId("rec-message");
    note.textContent = "";
    try {
      const { recordings } = await api("GET", this.base());
      this.showList(recordings);
    } catch (err) {
      note.textContent = `Cannot list the recordings: ${err.message}`;
    }
  }

  showList(recordings) {
    byId("rec-empty").hidden = recordings.length > 0;
    byId("rec-list").replaceChildren(...recordings.map((rec) => el("li", {
      class: rec.recording_id === this.current?.recording_id ? "current" : "",
    }, el("button", { type: "button", class: "rec-item", dataset: { id: rec.recording_id },
      onclick: () => this.open(rec.recording_id) },
    el("span", { class: "rec-desktop", text: `${rec.kind} ${rec.slot} · ${shortId(rec.desktop_session_id)}` }),
    el("time", { datetime: new Date(rec.start_ms).toISOString(), text: formatTime(new Date(rec.start_ms).toISOString()) }),
    el("span", { class: "rec-length", text: rec.recording ? "recording…" : duration(rec.duration_ms) }),
    el("span", { class: "rec-actors", text: (rec.actors || []).join(", ") || "no one acted" })))));
  }

  async open(recordingId) {
    const body = await api("GET", `${this.base()}/${recordingId}`);
    this.current = body.recording;
    this.events = body.timeline;
    byId("rec-player").hidden = false;
    byId("rec-title").textContent =
      `${body.recording.kind} ${body.recording.slot} · ${formatTime(new Date(body.recording.start_ms).toISOString())}`;
    byId("rec-download").href = `${this.base()}/${recordingId}/video`;
    byId("rec-export").href = `${this.base()}/${recordingId}/trajectory`;
    this.video.src = `${this.base()}/${recordingId}/video`;
    this.showEvents();
    this.drawTrack();
    for (const item of byId("rec-list").children) {
      item.classList.toggle("current", item.querySelector("button")?.dataset.id === recordingId);
    }
  }

  // The recording's length in ms: the video's once known, else the recording's own.
  length() {
    const fromVideo = Number.isFinite(this.video.duration) ? this.video.duration * 1000 : 0;
    return Math.max(fromVideo, this.current?.duration_ms || 0, 1);
  }

  seek(tMs) {
    this.video.pause();
    this.video.currentTime = tMs / 1000;
  }

  showEvents() {
    byId("rec-events").replaceChildren(...this.events.map((event) => {
      const point = event.point ? ` at ${event.point.x},${event.point.y}` : "";
      const guard = event.guard ? ` · guard ${event.guard}` : "";
      const element = elementLabel(event);
      return el("li", { class: `rec-event kind-${event.kind}` }, el("button", {
        type: "button", dataset: { t: String(event.t_ms), kind: event.kind },
        onclick: () => this.seek(event.t_ms),
      }, el("span", { class: "rec-t", text: duration(event.t_ms) }),
      el("span", { class: "rec-kind", text: KIND_LABELS[event.kind] || event.kind }),
      el("span", { class: "rec-name", text: `${event.name}${point}` }),
      ...(element ? [el("span", { class: "rec-element", text: element })] : []),
      el("span", { class: "rec-outcome", text: `${event.outcome}${guard}${event.door ? ` · ${event.door}` : ""} · ${event.actor}` })));
    }));
  }

  // Markers by kind on the seek bar, and the periods a person held the desktop shaded.
  drawTrack() {
    if (!this.current) return;
    const track = byId("rec-track");
    const length = this.length();
    const pct = (t) => `${Math.min(100, (100 * t) / length)}%`;
    const shades = [];
    let since = null;
    for (const event of this.events) {
      if (event.kind === "takeover" && since === null) since = event.t_ms;
      if ((event.kind === "hand_back" || event.kind === "stop") && since !== null) {
        shades.push([since, event.t_ms]);
        since = null;
      }
    }
    if (since !== null) shades.push([since, length]);
    track.replaceChildren(
      ...shades.map(([from, to]) => placed(el("span", { class: "rec-shade",
        title: "a person had control" }), { left: pct(from), width: `calc(${pct(to)} - ${pct(from)})` })),
      ...this.events.map((event) => placed(el("button", { type: "button",
        class: `rec-marker kind-${event.kind}`,
        title: `${duration(event.t_ms)} ${event.name}${elementLabel(event) ? ` ${elementLabel(event)}` : ""} (${event.outcome})`,
        "aria-label": `Seek to ${event.name} at ${duration(event.t_ms)}`,
        dataset: { t: String(event.t_ms), kind: event.kind },
        onclick: () => this.seek(event.t_ms) }), { left: pct(event.t_ms) })));
  }

  // The agent's click points shown at their moment, over the picture.
  drawPoints() {
    const overlay = byId("rec-overlay");
    const now = this.video.currentTime * 1000;
    const width = this.current?.width || 1;
    const height = this.current?.height || 1;
    const shown = this.events.filter((e) => e.point && e.t_ms <= now + 50 && now - e.t_ms < POINT_SHOWN_MS);
    overlay.replaceChildren(...shown.map((event) => placed(el("span", {
      class: `rec-point kind-${event.kind}`,
      title: `${event.name} at ${event.point.x},${event.point.y} (${event.outcome})`,
    }), { left: `${(100 * event.point.x) / width}%`, top: `${(100 * event.point.y) / height}%` })));
    for (const item of byId("rec-events").children) {
      const t = Number(item.querySelector("button").dataset.t);
      item.classList.toggle("past", t <= now);
    }
  }
}
