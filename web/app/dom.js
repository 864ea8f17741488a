// Tiny DOM helpers. Text always goes in through textContent: user content is never parsed
// as HTML anywhere in the app.

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "class") node.className = value;
    else if (name === "text") node.textContent = value;
    else if (name === "dataset") Object.assign(node.dataset, value);
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export const byId = (id) => document.getElementById(id);

export function shortId(id) {
  return String(id || "").slice(0, 8);
}

export function formatTime(iso) {
  if (!iso) return "—";
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return String(iso);
  return date.toLocaleString(undefined, {
    year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit",
    second: "2-digit",
  });
}

export function relayName(row) {
  return row.relay_name || row.relay || row.relay_id || "?";
}

export const STATE_NOTES = {
  unknown: "Relay disconnected: nothing can confirm this desktop now.",
  starting: "Starting…",
  stopping: "Stopping…",
  failed: "Failed",
};
