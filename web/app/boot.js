// Loaded before a page's modules, as a classic script. A module that fails to load leaves the
// page without its code, showing nothing but "loading": Chromium aborts a load in flight with
// ERR_NETWORK_CHANGED when one of the machine's network interfaces comes or goes (a VPN, a
// container's). The page then loads again, at most once in 10 s; a second failure says so.
const RELOADED_AT = "relaydesk-reloaded-at";

addEventListener(
  "error",
  (event) => {
    const script = event.target;
    if (!(script instanceof HTMLScriptElement) || script.type !== "module") return;
    const last = Number(sessionStorage.getItem(RELOADED_AT) || 0);
    if (Date.now() - last > 10000) {
      sessionStorage.setItem(RELOADED_AT, String(Date.now()));
      location.reload();
      return;
    }
    const note = document.createElement("p");
    note.setAttribute("role", "alert");
    note.textContent = "This page could not load its scripts. Check the connection and reload.";
    document.body.dataset.view = "failed";
    document.body.replaceChildren(note);
  },
  true,
);
