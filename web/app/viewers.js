// Viewer tabs opened from this page. A tab is opened synchronously in the click or key
// handler (a user gesture, so no pop-up blocker interferes) and pointed at the viewer once
// the server answers; if the answer has no viewer, the placeholder tab is closed again.
//
// Every viewer tab is named after its desktop session (the viewer page names itself too), so
// "Open viewer" on a session that already has a tab brings that tab forward instead of
// opening another one, even after the chat page was reloaded.

const CHANNEL = "relaydesk-viewers";
const tabs = new Set();

export function viewerName(sessionId) {
  return `relaydesk-viewer-${sessionId}`;
}

export function reserveTab() {
  const tab = window.open("", "_blank");
  if (tab) tabs.add(tab);
  return tab;
}

// The tab already showing this session's viewer, or a new (blank) tab reserved under its
// name. Call it in the click handler.
export function tabForSession(sessionId) {
  const tab = window.open("", viewerName(sessionId));
  if (!tab) return { tab: null, showing: false };
  tabs.add(tab);
  let showing = false;
  try {
    showing = tab.location.pathname.startsWith("/vnc/");
  } catch {
    showing = false; // another origin: treat it as a new tab
  }
  if (showing) tab.focus();
  return { tab, showing };
}

export function showInTab(tab, url, sessionId = null) {
  if (!url) {
    if (tab) {
      tab.close();
      tabs.delete(tab);
    }
    return null;
  }
  if (tab && !tab.closed) {
    if (sessionId) tab.name = viewerName(sessionId);
    tab.location.href = url;
    return tab;
  }
  const opened = window.open(url, sessionId ? viewerName(sessionId) : "_blank");
  if (opened) tabs.add(opened);
  return opened;
}

// `/desktop close`: this browser's viewer tabs close; the desktops keep running. Tabs opened
// by an earlier load of this page are reached through a BroadcastChannel (the viewer's
// bridge listens and closes its own tab).
export function closeViewerTabs() {
  let closed = 0;
  for (const tab of tabs) {
    if (!tab.closed) {
      tab.close();
      closed += 1;
    }
  }
  tabs.clear();
  if ("BroadcastChannel" in window) {
    const channel = new BroadcastChannel(CHANNEL);
    channel.postMessage({ type: "close" });
    channel.close();
  }
  return closed;
}
