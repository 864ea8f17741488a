// PNG images on the clipboard, both ways, where the browser allows it (docs/files.md).
//
// RFB carries only text, so images go through the viewer's clipboard-image route (a person's
// capability, like keyboard-state): PUT an image/png makes the desktop's CLIPBOARD hold it
// (set as the desktop's user), GET answers the desktop's image (204: none).
//
//   * person → desktop: "Send image" in the clipboard panel reads this computer's clipboard
//     (navigator.clipboard.read) and sends its image/png; Ctrl+V in the desktop does the same
//     before the V press when the paste holds an image and no text (bridge.js);
//   * desktop → person: "Get image" shows the desktop's image in the panel and writes it to
//     this computer's clipboard (navigator.clipboard.write) when the browser permits.
//
// A browser that asks first may refuse, or have no such API: the panel then says so and what
// to do (the shown image can still be saved or copied from its context menu).

const PNG = "image/png";

export const imageStats = { sent: 0, received: 0, messages: [] };
// Dispatched on window once the desktop's image is on this computer's clipboard: a remote
// text not yet written there (bridge.js) is older than it and must not replace it.
export const LOCAL_IMAGE_WRITTEN = "relaydesk:local-image-written";

function denied(err) {
  return err && (err.name === "NotAllowedError" || err.name === "SecurityError");
}

// The image/png of a paste event's clipboard data, or null.
export function pastedImage(clipboardData) {
  if (!clipboardData || !clipboardData.items) return null;
  for (const item of clipboardData.items) {
    if (item.kind === "file" && item.type === PNG) return item.getAsFile();
  }
  return null;
}

// The browser clipboard's image/png through the async API, or null (no API, refused, no
// image, or not within `timeoutMs`): quietly, for a Ctrl+V that had no paste event.
export function readClipboardPng(timeoutMs) {
  if (!navigator.clipboard || typeof navigator.clipboard.read !== "function") {
    return Promise.resolve(null);
  }
  const read = navigator.clipboard.read().then(async (items) => {
    const item = items.find((each) => each.types.includes(PNG));
    return item ? item.getType(PNG) : null;
  }).catch(() => null);
  let timer;
  const late = new Promise((resolve) => { timer = setTimeout(() => resolve(null), timeoutMs); });
  return Promise.race([read, late]).finally(() => clearTimeout(timer));
}

// Make the desktop's CLIPBOARD hold `blob` (a PNG); answers a message for the person.
export async function putClipboardImage(url, blob, fetchImpl = fetch) {
  let response;
  try {
    response = await fetchImpl(url, { method: "PUT", body: blob, headers: { "Content-Type": PNG },
      credentials: "same-origin", cache: "no-store" });
  } catch {
    return { ok: false, message: "The image could not be sent: the connection failed." };
  }
  if (response.ok) {
    imageStats.sent += 1;
    return { ok: true, message: "Image sent: the desktop's clipboard holds it (Ctrl+V pastes it)." };
  }
  let reason = `the server answered ${response.status}`;
  try {
    const body = await response.json();
    if (body && body.error && body.error.message) reason = body.error.message;
  } catch { /* not JSON: the status says it */ }
  return { ok: false, message: `The image was not sent: ${reason}.` };
}

// This computer's clipboard image through the async API: {blob} or {message} why not.
async function readLocalImage() {
  if (!navigator.clipboard || typeof navigator.clipboard.read !== "function") {
    return { message: "This browser does not let the page read images from the clipboard. "
      + "Paste with Ctrl+V in the desktop instead." };
  }
  let items;
  try {
    items = await navigator.clipboard.read();
  } catch (err) {
    if (denied(err)) {
      return { message: "The browser refused access to the clipboard. Allow clipboard access "
        + "for this site (the icon in the address bar), then try again." };
    }
    return { message: "The clipboard could not be read." };
  }
  for (const item of items) {
    if (item.types.includes(PNG)) return { blob: await item.getType(PNG) };
  }
  return { message: "This computer's clipboard holds no image." };
}

// Write `blob` (a PNG) to this computer's clipboard; a message for the person.
async function writeLocalImage(blob) {
  if (!navigator.clipboard || typeof navigator.clipboard.write !== "function"
      || typeof ClipboardItem === "undefined") {
    return "This browser does not let the page copy images: right-click the image to copy or "
      + "save it.";
  }
  try {
    await navigator.clipboard.write([new ClipboardItem({ [PNG]: blob })]);
  } catch (err) {
    if (denied(err)) {
      return "The browser refused to write to the clipboard: allow clipboard access for this "
        + "site, or right-click the image to copy it.";
    }
    return "The image could not be copied: right-click it to copy or save it.";
  }
  imageStats.received += 1;
  window.dispatchEvent(new Event(LOCAL_IMAGE_WRITTEN));
  return "Copied the desktop's image to this computer's clipboard.";
}

export function wireClipboardImages({ url, sendButton, getButton, preview, status,
  fetchImpl = fetch }) {
  const say = (message) => {
    status.textContent = message;
    imageStats.messages.push(message);
  };
  sendButton.addEventListener("click", async () => {
    say("Reading this computer's clipboard…");
    const local = await readLocalImage();
    if (!local.blob) {
      say(local.message);
      return;
    }
    say("Sending the image…");
    say((await putClipboardImage(url, local.blob, fetchImpl)).message);
  });
  getButton.addEventListener("click", async () => {
    say("Reading the desktop's clipboard…");
    let response;
    try {
      response = await fetchImpl(url, { credentials: "same-origin", cache: "no-store" });
    } catch {
      say("The desktop's clipboard could not be read: the connection failed.");
      return;
    }
    if (response.status === 204) {
      preview.hidden = true;
      say("The desktop's clipboard holds no image.");
      return;
    }
    if (!response.ok) {
      say(`The desktop's clipboard could not be read (the server answered ${response.status}).`);
      return;
    }
    const blob = new Blob([await response.arrayBuffer()], { type: PNG });
    preview.src = await dataUrl(blob);  // the page's policy allows data: images, not blob:
    preview.hidden = false;
    say(await writeLocalImage(blob));
  });
}

function dataUrl(blob) {
  return new Promise((resolve) => {
    const reader = new FileReader();
    reader.addEventListener("load", () => resolve(String(reader.result)));
    reader.addEventListener("error", () => resolve(""));
    reader.readAsDataURL(blob);
  });
}
