// The composer: sends on Enter, keeps a draft per conversation in sessionStorage (so an
// expired session loses nothing), and completes `/desktop` commands with inline help.

const COMMANDS = [
  ["/desktop", "open the relay's desktop (attach if running, else start)"],
  ["/desktop virtual", "open the relay's virtual desktop (as /desktop)"],
  ["/desktop docker", "open the relay's desktop in a container of its own"],
  ["/desktop local", "open the relay host's real screen"],
  ["/desktop list", "list the active desktops here"],
  ["/desktop status", "one relay's desktops, checked now"],
  ["/desktop attach", "open a viewer on the running desktop; never starts"],
  ["/desktop stop", "stop the running desktop (asks for confirmation)"],
  ["/desktop close", "close this browser's viewer tab; the desktop keeps running"],
  ["/desktop help", "show every command"],
];
const TAKES_RELAY = new Set(["/desktop", "/desktop virtual", "/desktop docker", "/desktop local",
  "/desktop status",
  "/desktop attach", "/desktop stop"]);
const DRAFT_PREFIX = "relaydesk.draft.";

export function completions(text, relays) {
  const typed = text.replace(/^\s+/, "");
  if (!typed.startsWith("/") || typed.includes("\n")) return [];
  const lower = typed.toLowerCase();
  const out = [];
  for (const [usage, help] of COMMANDS) {
    if (usage.startsWith(lower) && usage !== lower.trimEnd()) out.push({ text: usage, help });
    if (TAKES_RELAY.has(usage) && lower.startsWith(usage + " ")) {
      const rest = lower.slice(usage.length + 1);
      if (rest.includes(" ")) continue;
      for (const relay of relays) {
        const candidate = `${usage} ${relay}`;
        if (relay.toLowerCase().startsWith(rest) && candidate.toLowerCase() !== lower) {
          out.push({ text: candidate, help: `relay ${relay}` });
        }
      }
    }
  }
  // "/desktop " followed by a relay prefix also matches the bare open command's relays
  return out.slice(0, 12);
}

export class Composer {
  constructor({ form, input, list, error, onSend }) {
    Object.assign(this, { form, input, list, error, onSend });
    this.conversationId = null;
    this.relays = [];
    this.items = [];
    this.active = -1;
    this.busy = false;
    input.addEventListener("input", () => this.changed());
    input.addEventListener("keydown", (event) => this.key(event));
    input.addEventListener("blur", () => setTimeout(() => this.hide(), 150));
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      this.send();
    });
  }

  use(conversationId, relays) {
    this.conversationId = conversationId;
    this.relays = relays;
    this.input.value = sessionStorage.getItem(DRAFT_PREFIX + conversationId) || "";
    this.error.textContent = "";
    this.hide();
    this.ready(true);
  }

  // Typing waits for an open conversation: what was typed before it opened would be replaced
  // by the conversation's draft, and a message sent then would have nowhere to go.
  ready(on) {
    this.input.disabled = !on;
    this.form.querySelector("button[type='submit']").disabled = !on;
  }

  fill(text) {
    this.input.value = text;
    this.changed();
    this.input.focus();
  }

  changed() {
    if (this.conversationId) {
      sessionStorage.setItem(DRAFT_PREFIX + this.conversationId, this.input.value);
    }
    this.error.textContent = "";
    this.suggest();
  }

  suggest() {
    this.items = completions(this.input.value, this.relays);
    this.active = -1;
    this.list.replaceChildren();
    if (this.items.length === 0) return this.hide();
    this.items.forEach((item, index) => {
      const option = document.createElement("li");
      option.id = `suggestion-${index}`;
      option.setAttribute("role", "option");
      option.setAttribute("aria-selected", "false");
      const code = document.createElement("code");
      code.textContent = item.text;
      const help = document.createElement("span");
      help.className = "suggestion-help";
      help.textContent = item.help;
      option.append(code, " ", help);
      option.addEventListener("mousedown", (event) => {
        event.preventDefault();
        this.accept(index);
      });
      this.list.append(option);
    });
    this.list.hidden = false;
    this.input.setAttribute("aria-expanded", "true");
  }

  hide() {
    this.list.hidden = true;
    this.input.setAttribute("aria-expanded", "false");
    this.input.removeAttribute("aria-activedescendant");
  }

  highlight(index) {
    this.active = index;
    [...this.list.children].forEach((option, i) =>
      option.setAttribute("aria-selected", i === index ? "true" : "false"));
    if (index >= 0) this.input.setAttribute("aria-activedescendant", `suggestion-${index}`);
  }

  accept(index) {
    const item = this.items[index];
    if (!item) return;
    this.fill(TAKES_RELAY.has(item.text) ? item.text + " " : item.text);
  }

  key(event) {
    const open = !this.list.hidden && this.items.length > 0;
    if (open && (event.key === "ArrowDown" || event.key === "ArrowUp")) {
      event.preventDefault();
      const step = event.key === "ArrowDown" ? 1 : -1;
      this.highlight((this.active + step + this.items.length) % this.items.length);
    } else if (open && event.key === "Tab") {
      event.preventDefault();
      this.accept(this.active >= 0 ? this.active : 0);
    } else if (open && event.key === "Escape") {
      event.preventDefault();
      this.hide();
    } else if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      if (open && this.active >= 0) this.accept(this.active);
      else this.send();
    }
  }

  async send() {
    const text = this.input.value;
    if (!text.trim() || this.busy) return;
    this.busy = true;
    this.hide();
    try {
      // The draft stays until the server has the message: a failed post loses nothing.
      const ok = await this.onSend(text);
      if (ok) {
        this.input.value = "";
        sessionStorage.removeItem(DRAFT_PREFIX + this.conversationId);
      }
    } finally {
      this.busy = false;
    }
  }
}
