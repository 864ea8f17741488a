// The viewer's Files panel and drag-and-drop upload (docs/files.md).
//
// Files dropped on the page (or picked) upload into the desktop's ~/Downloads as the desktop's
// user, through POST …/files/{relay}/virtual/main/upload?desktop_session_id=… with this
// browser's session cookie and CSRF token: one byte stream per file, a progress bar, a Cancel
// button, a renamed copy when the name exists (never an overwrite), and the server's reason
// when it refuses (too large, no space, outside the home). The panel lists ~/Downloads (and
// the folders below it the person opens) with sizes and times; a click downloads.
import { grantOf, sessionFromPath } from "/viewer/viewer.js";

const HOME_FOLDER = "Downloads";
const NARROW = "(max-width: 600px)";

function el(tag, attrs = {}, text = "") {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, value);
  if (text) node.textContent = text;
  return node;
}

export function humanSize(bytes) {
  const units = ["B", "KB", "MB", "GB", "TB"];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${unit ? value.toFixed(1) : value} ${units[unit]}`;
}

function createFiles() {
  const session = sessionFromPath(window.location.pathname);
  const grant = session && grantOf(session.token);
  if (!grant) return null;
  const base = `/api/v1/conversations/${encodeURIComponent(grant.c)}/files/`
    + `${encodeURIComponent(grant.r)}/virtual/main`;
  const where = `desktop_session_id=${encodeURIComponent(session.sid)}`;
  let folder = HOME_FOLDER;
  let csrf = null;

  const group = el("div", { class: "group" });
  const button = el("button", {
    id: "files-button", class: "tool", type: "button", "aria-expanded": "false",
    "aria-controls": "files-panel", title: "Files in the desktop's Downloads", "aria-label": "Files",
  });
  const icon = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  icon.setAttribute("viewBox", "0 0 24 24");
  icon.setAttribute("aria-hidden", "true");
  icon.innerHTML = '<path d="M3.5 6.5a2 2 0 0 1 2-2h4l2 2h7a2 2 0 0 1 2 2v9a2 2 0 0 1-2 2h-13'
    + 'a2 2 0 0 1-2-2z" fill="none" stroke="currentColor" stroke-width="1.8"/>';
  button.append(icon, el("span", { class: "label" }, "Files"));
  const panel = el("div", { id: "files-panel", class: "popover panel", role: "dialog",
    "aria-label": "Files" });
  panel.hidden = true;
  const heading = el("label", { id: "files-folder" }, `~/${folder}`);
  const list = el("ul", { id: "files-list", class: "files-list", "aria-label": "Files in the folder" });
  const picker = el("input", { id: "files-pick", type: "file", multiple: "" });
  const uploads = el("ul", { id: "files-uploads", "aria-label": "Uploads" });
  const message = el("p", { id: "files-message", class: "hint", role: "status", "aria-live": "polite" });
  const hint = el("p", { class: "hint" }, "Drop files on the desktop to upload them to ~/Downloads.");
  panel.append(heading, list, picker, uploads, message, hint);
  group.append(button, panel);
  const bar = document.getElementById("bar");
  bar.insertBefore(group, document.getElementById("fullscreen"));
  // A phone's toolbar has no room for it (and no files to drop).
  const narrow = window.matchMedia(NARROW);
  const fit = () => { group.hidden = narrow.matches; };
  narrow.addEventListener("change", fit);
  fit();

  async function token() {
    if (csrf !== null) return csrf;
    const me = await fetch("/api/v1/me", { credentials: "same-origin", cache: "no-store" });
    csrf = me.ok ? (await me.json()).csrf_token || "" : "";
    return csrf;
  }

  async function refresh() {
    heading.textContent = `~/${folder}`;
    const response = await fetch("/api/v1/actions/desktop_files_list", {
      method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRF-Token": await token() },
      body: JSON.stringify({ conversation_id: grant.c, relay: grant.r,
        desktop_session_id: session.sid, path: `~/${folder}` }),
    });
    const answer = await response.json();
    list.replaceChildren();
    if (!response.ok) {
      message.textContent = answer.error ? answer.error.message : "Cannot list the folder.";
      return;
    }
    if (folder !== HOME_FOLDER) {
      const up = el("li");
      const link = el("button", { type: "button", class: "quiet" }, "..");
      link.addEventListener("click", () => { folder = folder.split("/").slice(0, -1).join("/"); refresh(); });
      up.append(link);
      list.append(up);
    }
    for (const entry of answer.entries) {
      if (entry.name.startsWith(".")) continue;
      const item = el("li", { "data-name": entry.name });
      const when = new Date(entry.mtime * 1000).toLocaleString();
      if (entry.type === "dir") {
        const open = el("button", { type: "button", class: "quiet" }, `${entry.name}/`);
        open.addEventListener("click", () => { folder = `${folder}/${entry.name}`; refresh(); });
        item.append(open);
      } else if (entry.type === "file") {
        const path = encodeURIComponent(`~/${folder}/${entry.name}`);
        item.append(el("a", { href: `${base}/download?path=${path}&${where}`, download: entry.name },
          entry.name));
      } else {
        continue;
      }
      item.append(el("span", { class: "hint" }, ` ${humanSize(entry.size)} · ${when}`));
      list.append(item);
    }
  }

  function upload(file) {
    const row = el("li", { "data-name": file.name });
    const progress = el("progress", { max: String(file.size || 1), value: "0",
      "aria-label": `Uploading ${file.name}` });
    const cancel = el("button", { type: "button", class: "quiet" }, "Cancel");
    const note = el("span", { class: "hint" }, ` ${file.name}`);
    row.append(progress, note, cancel);
    uploads.append(row);
    const path = encodeURIComponent(`~/${HOME_FOLDER}/${file.name}`);
    const request = new XMLHttpRequest();
    request.open("POST", `${base}/upload?path=${path}&exists=rename&${where}`);
    request.withCredentials = true;
    request.upload.addEventListener("progress", (event) => { progress.value = event.loaded; });
    cancel.addEventListener("click", () => request.abort());
    const done = new Promise((resolve) => {
      request.addEventListener("loadend", () => {
        cancel.remove();
        let answer = {};
        try { answer = JSON.parse(request.responseText || "{}"); } catch { answer = {}; }
        if (request.status === 200) {
          progress.value = file.size;
          note.textContent = ` ${file.name} → ~/${answer.path}`;
        } else if (request.status === 0) {
          note.textContent = ` ${file.name}: cancelled`;
        } else {
          note.textContent = ` ${file.name}: ${answer.error ? answer.error.message : "refused"}`;
          row.dataset.refused = answer.error ? answer.error.code : String(request.status);
        }
        resolve(request.status);
      });
    });
    token().then((value) => {
      request.setRequestHeader("X-CSRF-Token", value);
      request.setRequestHeader("Content-Type", "application/octet-stream");
      request.send(file);
    });
    return done;
  }

  async function uploadAll(files) {
    panel.hidden = false;
    button.setAttribute("aria-expanded", "true");
    await Promise.all(Array.from(files, upload));
    await refresh();
  }

  button.addEventListener("click", () => {
    panel.hidden = !panel.hidden;
    button.setAttribute("aria-expanded", String(!panel.hidden));
    if (!panel.hidden) refresh();
  });
  picker.addEventListener("change", () => { uploadAll(picker.files); picker.value = ""; });
  document.addEventListener("dragover", (event) => {
    if (event.dataTransfer && Array.from(event.dataTransfer.types).includes("Files")) {
      event.preventDefault();
      event.dataTransfer.dropEffect = "copy";
    }
  });
  document.addEventListener("drop", (event) => {
    if (!event.dataTransfer || !event.dataTransfer.files.length) return;
    event.preventDefault();
    uploadAll(event.dataTransfer.files);
  });
  return { refresh, upload, uploadAll };
}

window.relaydeskFiles = createFiles();
