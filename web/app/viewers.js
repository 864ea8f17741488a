// Viewer tabs opened from this page. A tab is opened synchronously in the click or key
// handler (a user gesture, so no pop-up blocker interferes) and pointed at the viewer once
// the server answers; if the answer has no viewer, the placeholder tab is closed again.

const CHANNEL = "relaydesk-viewers";
const tabs = new Set();

export function reserveTab() {
  const tab = window.open("", "_blank");
  if (tab) tabs.add(tab);
  return tab;
}

export function showInTab(tab, url) {
  if (!url) {
    if (tab) {
      tab.close();
      tabs.delete(tab);
    }
    return null;
  }
  if (tab && !tab.closed) {
    tab.location.href = url;
    return tab;
  }
  const opened = window.open(url, "_blank");
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
