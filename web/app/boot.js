// Loaded before a page's modules, as a classic script. A module that fails to load leaves the
// page without its code, showing nothing but "loading": Chromium aborts every load in flight
// with ERR_NETWORK_CHANGED when one of the machine's network interfaces comes or goes (a VPN,
// a container's), and containers starting one after another change them for seconds. The page
// then loads again, waiting longer each time (0, 0.5, 1, 2 and 4 s); a page that failed five
// times in a row within a minute says so instead. A load that succeeds starts the count again.
const RELOADS = "relaydesk-reloads";
const RELOAD_DELAYS_MS = [0, 500, 1000, 2000, 4000];
const RELOADS_WINDOW_MS = 60000;
let failed = false;

function recentReloads(now) {
  try {
    const times = JSON.parse(sessionStorage.getItem(RELOADS) || "[]");
    return Array.isArray(times) ? times.filter((t) => now - t < RELOADS_WINDOW_MS) : [];
  } catch {
    return [];
  }
}

addEventListener(
  "error",
  (event) => {
    const script = event.target;
    if (!(script instanceof HTMLScriptElement) || script.type !== "module") return;
    if (failed) return; // one reload for a page, however many of its modules failed
    failed = true;
    const now = Date.now();
    const reloads = recentReloads(now);
    if (reloads.length < RELOAD_DELAYS_MS.length) {
      const delay = RELOAD_DELAYS_MS[reloads.length];
      sessionStorage.setItem(RELOADS, JSON.stringify([...reloads, now]));
      setTimeout(() => location.reload(), delay);
      return;
    }
    sessionStorage.removeItem(RELOADS);
    const note = document.createElement("p");
    note.setAttribute("role", "alert");
    note.textContent = "This page could not load its scripts. Check the connection and reload.";
    document.body.dataset.view = "failed";
    document.body.replaceChildren(note);
  },
  true,
);

addEventListener("load", () => {
  if (!failed) sessionStorage.removeItem(RELOADS);
});
