// The "Active Desktops" dock: a live count badge and a panel with one row per desktop, each
// with Open and Stop. Stop always goes through a dialog naming the exact session; confirming
// sends desktop_stop_confirm with that session id, so a desktop restarted meanwhile is never
// stopped by a stale confirmation (the conflict is shown and the rows refresh). No bulk stop.
// Each row shows who is in control (idle, an agent, a person) live, with Stop agent, Take
// control and Hand back (docs/control.md). Above the rows, the safety checks a model raised in
// a computer-use call wait for a person's Approve or Deny (docs/computer-use.md). Operators
// (admin accounts) see one more line: the relays' warm pools (docs/desktops.md, "Warm pool").
import { action } from "./api.js";
import { byId, el, formatTime, relayName, shortId, STATE_NOTES } from "./dom.js";

const LIVE = new Set(["starting", "running", "paused", "stopping", "unknown"]);

// A row's control as a short text: "idle", "agent bot", "alice (holds it)".
export function controlText(control) {
  if (!control || control.state === "idle") return "idle";
  if (control.state === "agent") return `agent ${control.name}`;
  return control.held ? `${control.name} (took control)` : `${control.name} (using it)`;
}

export class Dock {
  constructor({ openDesktop, onInventory = () => {}, isOperator = () => false }) {
    this.openDesktop = openDesktop;
    this.onInventory = onInventory;
    this.isOperator = isOperator;
    this.conversationId = null;
    this.rows = [];
    this.pending = null;
    this.button = byId("dock-button");
    this.panel = byId("dock-panel");
    this.dialog = byId("stop-dialog");
    this.button.addEventListener("click", () => this.toggle());
    byId("dock-close").addEventListener("click", () => this.toggle(false));
    byId("stop-cancel").addEventListener("click", () => this.closeDialog());
    byId("stop-confirm").addEventListener("click", () => this.confirmStop());
    this.dialog.addEventListener("close", () => { this.pending = null; });
    this.panel.addEventListener("keydown", (event) => {
      if (event.key === "Escape") this.toggle(false);
    });
  }

  use(conversationId) {
    this.conversationId = conversationId;
    this.show([]);
    this.showApprovals([]);
    this.refreshApprovals();
    this.refreshPool();
    return this.refresh();
  }

  // One line for operators: each relay's pool, "relay: standard 2/2 ready, minimal 1/1 ready
  // (5 hits, 1 miss)". Read again when the inventory changes (a start may have taken one).
  async refreshPool() {
    const line = byId("dock-pool");
    if (!this.conversationId || !this.isOperator()) {
      line.hidden = true;
      return;
    }
    const { status, body } = await action("desktop_pool", { conversation_id: this.conversationId });
    const pools = status === 200 ? (body.pools || []) : [];
    line.hidden = pools.length === 0;
    line.textContent = pools.map((pool) => {
      const profiles = pool.profiles.map((p) => `${p.profile} ${p.ready}/${p.size} ready`).join(", ");
      return `Warm pool on ${pool.relay}: ${profiles || "none"} (${pool.hits} hits, ${pool.misses} misses)`;
    }).join(" · ");
  }

  // safety_checks_pending / _decided: the requests are read again (the event carries no
  // messages: read members follow the stream too; they get 403 here and see nothing).
  async refreshApprovals() {
    if (!this.conversationId) return;
    const { status, body } = await action("safety_checks_list",
      { conversation_id: this.conversationId });
    this.showApprovals(status === 200 ? (body.requests || []) : []);
  }

  showApprovals(requests) {
    const pending = requests.filter((r) => r.state === "pending");
    byId("approvals").hidden = pending.length === 0;
    this.button.dataset.approvals = String(pending.length);
    byId("approval-list").replaceChildren(...pending.map((request) => {
      const where = `${request.relay} ${request.kind} ${request.slot}`;
      const messages = request.checks.map((c) => c.message || c.code).join(" · ");
      const decide = (decision) => this.decideApproval(request, decision);
      return el("li", { class: "approval", dataset: { approval: request.approval_id } },
        el("p", { text: `${request.agent} on ${where} asks to go on: ${messages}` }),
        el("span", { class: "approval-actions" },
          el("button", { type: "button", "aria-label": `Approve ${request.agent}'s request on ${where}`,
            onclick: () => decide("approve") }, "Approve"),
          el("button", { type: "button", class: "danger",
            "aria-label": `Deny ${request.agent}'s request on ${where}`,
            onclick: () => decide("deny") }, "Deny")));
    }));
  }

  async decideApproval(request, decision) {
    const { status, body } = await action("safety_checks_decide", {
      conversation_id: this.conversationId, approval_id: request.approval_id, decision,
    });
    byId("dock-message").textContent = status === 200
      ? `${request.agent}'s request ${body.request.state}.`
      : `${decision === "approve" ? "Approve" : "Deny"}: ${body?.error?.message || `error ${status}`}`;
    await this.refreshApprovals();
  }

  async refresh() {
    if (!this.conversationId) return;
    const { status, body } = await action("desktop_list_active",
      { conversation_id: this.conversationId });
    if (status === 200) this.update(body.desktops || []);
  }

  // The conversation's inventory as it is now (a placeholder before it is known goes to show).
  update(rows, changed = []) {
    this.show(rows);
    if (changed.length) this.refreshPool();
    this.onInventory(rows, changed);
  }

  // desktop_control_changed: one desktop's control, live (no refetch of the inventory).
  controlChanged({ relay_id: relayId, desktop_session_id: sid, control }) {
    const row = this.rows.find((r) => r.desktop_session_id === sid && r.relay_id === relayId);
    if (!row) return;
    row.control = control;
    this.show(this.rows);
  }

  async control(row, name) {
    const label = { desktop_take_control: "Take control", desktop_hand_back: "Hand back",
      agent_stop: "Stop agent" }[name];
    const { status, body } = await action(name, {
      conversation_id: this.conversationId, relay: relayName(row), kind: row.kind,
      slot: row.slot || "main", desktop_session_id: row.desktop_session_id,
    });
    const message = byId("dock-message");
    if (status !== 200) {
      message.textContent = `${label}: ${body?.error?.message || `error ${status}`}`;
      return;
    }
    if (name === "agent_stop") {
      message.textContent = (body.stopped || []).length || body.cancelled
        ? `Stopped ${(body.stopped || []).join(", ") || "the agent"}: its input is refused for ${body.regrant_after_s} s.`
        : "No agent is acting on that desktop.";
    } else {
      message.textContent = name === "desktop_take_control"
        ? "You have control: agent input is refused until you hand it back."
        : "Handed back: agents may act again.";
    }
    this.controlChanged({ relay_id: row.relay_id, desktop_session_id: row.desktop_session_id,
      control: body.control });
  }

  controlCell(row, label) {
    const control = row.control || { state: "idle" };
    const cell = el("td", { class: "control" },
      el("span", { class: `pill control-${control.state}`, text: controlText(control) }));
    if (row.state !== "running") return cell;
    const buttons = [];
    if (control.agent) {
      buttons.push(el("button", { type: "button", class: "danger", "aria-label": `Stop the agent on ${label}`,
        onclick: () => this.control(row, "agent_stop") }, "Stop agent"));
    }
    if (control.state === "person" && control.held) {
      buttons.push(el("button", { type: "button", "aria-label": `Hand back ${label}`,
        onclick: () => this.control(row, "desktop_hand_back") }, "Hand back"));
    } else {
      buttons.push(el("button", { type: "button", "aria-label": `Take control of ${label}`,
        onclick: () => this.control(row, "desktop_take_control") }, "Take control"));
    }
    cell.append(el("span", { class: "control-actions" }, ...buttons));
    return cell;
  }

  toggle(open = this.panel.hidden) {
    this.panel.hidden = !open;
    this.button.setAttribute("aria-expanded", String(open));
    if (open) {
      this.refresh();
      (this.panel.querySelector("button") || this.panel).focus();
    } else {
      this.button.focus();
    }
  }

  show(rows) {
    this.rows = rows.filter((row) => LIVE.has(row.state));
    const count = this.rows.length;
    const badge = byId("dock-count");
    badge.textContent = String(count);
    badge.dataset.count = String(count);
    this.button.setAttribute("aria-label", `Active Desktops: ${count}`);
    byId("dock-empty").hidden = count > 0;
    byId("dock-table").hidden = count === 0;
    byId("dock-rows").replaceChildren(...this.rows.map((row) => this.renderRow(row)));
  }

  renderRow(row) {
    const state = row.state;
    const label = `${relayName(row)} ${row.kind} ${row.slot || "main"}`;
    const stateCell = el("td", { class: "state" }, el("span", { class: `pill state-${state}`, text: state }));
    if (row.recording) {
      stateCell.append(el("span", { class: "rec-mark", title: "This desktop is being recorded",
        "aria-label": "recording" }, "REC"));
    }
    if (state === "unknown" || row.reason) {
      stateCell.append(el("span", { class: "why",
        text: state === "unknown" ? STATE_NOTES.unknown : row.reason }));
    }
    const actions = el("td", { class: "row-actions" });
    if (state === "running") {
      actions.append(el("button", { type: "button", "aria-label": `Open ${label}`,
        onclick: () => this.openDesktop(row) }, "Open"));
    }
    if (state === "running" || state === "paused") {
      const [name, text] = state === "running"
        ? ["desktop_pause", "Pause"] : ["desktop_resume", "Resume"];
      actions.append(el("button", { type: "button", "aria-label": `${text} ${label}`,
        onclick: () => this.pauseOrResume(row, name, text) }, text));
    }
    if (row.can_stop !== false) {
      actions.append(el("button", { type: "button", class: "danger", "aria-label": `Stop ${label}`,
        onclick: () => this.askStop(row) }, "Stop…"));
    }
    const control = (row.control && row.control.state) || "idle";
    return el("tr", { class: `dock-row state-${state}`,
      dataset: { session: row.desktop_session_id, state, control } },
      el("th", { scope: "row", text: relayName(row) }),
      el("td", { text: row.slot && row.slot !== "main" ? `${row.kind} (${row.slot})` : row.kind }),
      stateCell,
      this.controlCell(row, label),
      el("td", { text: row.started_by || "—" }),
      el("td", {}, el("time", { datetime: row.started_at || "", text: formatTime(row.started_at) })),
      el("td", {}, el("code", { title: row.desktop_session_id, text: shortId(row.desktop_session_id) })),
      actions);
  }

  askStop(row) {
    this.pending = row;
    const details = byId("stop-details");
    const pairs = [
      ["Relay", relayName(row)], ["Kind", row.kind], ["Slot", row.slot || "main"],
      ["Started at", formatTime(row.started_at)], ["Started by", row.started_by || "—"],
      ["Session", row.desktop_session_id],
    ];
    details.replaceChildren(...pairs.flatMap(([name, value]) =>
      [el("dt", { text: name }), el("dd", { text: value })]));
    byId("stop-error").textContent = "";
    byId("stop-confirm").disabled = false;
    byId("stop-confirm").hidden = false;
    byId("stop-cancel").textContent = "Cancel";
    this.dialog.showModal();
    byId("stop-cancel").focus();
  }

  closeDialog() {
    if (this.dialog.open) this.dialog.close();
  }

  // Pause freezes the desktop (its viewers show it paused); Resume brings it back as it was.
  async pauseOrResume(row, name, text) {
    const { status, body } = await action(name, {
      conversation_id: this.conversationId, relay: relayName(row),
      desktop_session_id: row.desktop_session_id,
    });
    byId("dock-message").textContent = status === 200
      ? `Desktop ${body.desktop.state}.`
      : `${text}: ${body?.error?.message || `error ${status}`}`;
    await this.refresh();
  }

  async confirmStop() {
    const row = this.pending;
    if (!row) return;
    const confirm = byId("stop-confirm");
    confirm.disabled = true;
    const { status, body } = await action("desktop_stop_confirm", {
      conversation_id: this.conversationId,
      relay: relayName(row),
      kind: row.kind,
      slot: row.slot || "main",
      desktop_session_id: row.desktop_session_id,
    });
    if (status === 200) {
      this.closeDialog();
      byId("dock-message").textContent =
        body.was_running === false ? "That desktop had already stopped." : "Desktop stopped.";
      await this.refresh();
      return;
    }
    const error = body?.error || {};
    const current = error.current_session_id || error.details?.current_session_id;
    byId("stop-error").textContent = error.code === "session_conflict"
      ? `Nothing was stopped: this desktop was restarted meanwhile and now runs session ${shortId(current)}. The list is refreshed; check the new session before stopping it.`
      : `Nothing was stopped: ${error.message || `error ${status}`}`;
    confirm.hidden = true;
    byId("stop-cancel").textContent = "Close";
    byId("stop-cancel").focus();
    await this.refresh();
  }
}
