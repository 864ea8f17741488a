"""One browser as its tools see it: tabs (page targets), a DevTools session per tab, and the
waits a navigation needs (load, network idle, a URL)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

from relay.browser.cdp import CdpConnection, CdpError
from wire.errors import ErrorCode, OpError

# The main frame is quiet this long with no request in flight: the network is idle.
NETWORK_IDLE_S: Final = 0.5
POLL_S: Final = 0.05
DOWNLOADS_KEPT: Final = 200
_TAB_STATE: Final = "[document.visibilityState, document.readyState, document.title]"


def no_tab(tab: str) -> OpError:
    return OpError(
        ErrorCode.NOT_FOUND,
        f"no tab {tab[:64]!r} in the browser",
        {"field": "tab", "suggestion": "list the tabs with browser_tabs"},
    )


class Browser:
    """Tabs and their sessions over one DevTools connection."""

    def __init__(self, cdp: CdpConnection) -> None:
        self.cdp = cdp
        self._sessions: dict[str, str] = {}  # tab (target id) → session id
        self._enabled: set[str] = set()
        self._downloads: dict[str, dict[str, Any]] = {}  # by the browser's guid
        self._stop_hearing: Callable[[], None] | None = None

    async def save_downloads(self, directory: Path) -> None:
        """Save downloads into ``directory`` (created by the browser, as the desktop's user)
        under their own names, and keep track of each."""
        self._stop_hearing = self.cdp.listen(self._heard_download)
        await self.cdp.call(
            "Browser.setDownloadBehavior",
            {"behavior": "allow", "downloadPath": str(directory), "eventsEnabled": True},
        )

    def _heard_download(self, method: str, params: dict[str, Any], session: str | None) -> None:
        guid = str(params.get("guid", ""))
        if method == "Browser.downloadWillBegin":
            self._downloads[guid] = {
                "id": guid,
                "file": str(params.get("suggestedFilename", "")),
                "url": str(params.get("url", "")),
                "state": "inProgress",
                "received_bytes": 0,
                "total_bytes": None,
            }
            while len(self._downloads) > DOWNLOADS_KEPT:
                del self._downloads[next(iter(self._downloads))]
        elif method == "Browser.downloadProgress" and guid in self._downloads:
            self._downloads[guid] |= {
                "state": str(params.get("state", "inProgress")),
                "received_bytes": int(params.get("receivedBytes", 0)),
                "total_bytes": int(params["totalBytes"]) if params.get("totalBytes") else None,
            }

    def downloads(self) -> list[dict[str, Any]]:
        """The downloads since the relay began speaking to the browser, oldest first:
        ``state`` is ``inProgress``, ``completed`` or ``canceled``."""
        return [dict(d) for d in self._downloads.values()]

    async def pages(self) -> list[dict[str, Any]]:
        """The browser's tabs (page targets) as it lists them."""
        answer = await self.cdp.call("Target.getTargets")
        return [t for t in answer.get("targetInfos", []) if t.get("type") == "page"]

    async def session(self, tab: str) -> str:
        """The DevTools session attached to ``tab`` (attached on first use, Page enabled)."""
        if tab in self._sessions:
            return self._sessions[tab]
        try:
            answer = await self.cdp.call(
                "Target.attachToTarget", {"targetId": tab, "flatten": True}
            )
        except CdpError:
            raise no_tab(tab) from None
        session = str(answer["sessionId"])
        self._sessions[tab] = session
        await self.cdp.call("Page.enable", session_id=session)
        await self.cdp.call("Page.setLifecycleEventsEnabled", {"enabled": True}, session)
        return session

    async def send(self, tab: str, method: str, params: dict[str, Any] | None = None) -> Any:
        """A command in ``tab``'s session; a session the browser dropped is attached again."""
        session = await self.session(tab)
        try:
            return await self.cdp.call(method, params, session)
        except CdpError as err:
            if "session" not in err.cdp_message.lower():
                raise
            self._sessions.pop(tab, None)
            return await self.cdp.call(method, params, await self.session(tab))

    async def evaluate(self, tab: str, expression: str) -> Any:
        """The value of a page expression (by value; awaited when it is a promise)."""
        answer = await self.send(
            tab,
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
        )
        if "exceptionDetails" in answer:
            text = answer["exceptionDetails"].get("text", "exception")
            raise OpError(ErrorCode.ACTION_FAILED, f"the page threw: {text}")
        return answer.get("result", {}).get("value")

    async def tab_info(self, target: dict[str, Any]) -> dict[str, Any]:
        """A tab as ``browser_tabs`` lists it: id, url, title, active, loading."""
        tab = str(target["targetId"])
        try:
            visibility, ready, title = await self.evaluate(tab, _TAB_STATE)
        except OpError:
            visibility, ready, title = "hidden", "loading", target.get("title", "")
        return {
            "id": tab,
            "url": target.get("url", ""),
            "title": title or target.get("title", ""),
            "active": visibility == "visible",
            "loading": ready != "complete",
        }

    async def tabs(self) -> list[dict[str, Any]]:
        return list(await asyncio.gather(*(self.tab_info(t) for t in await self.pages())))

    async def resolve(self, tab: object) -> str:
        """The tab named, else the active one (the first showing), else the first."""
        pages = await self.pages()
        if isinstance(tab, str):
            if any(p["targetId"] == tab for p in pages):
                return tab
            raise no_tab(tab)
        if not pages:
            raise OpError(
                ErrorCode.NOT_FOUND,
                "the browser has no tab",
                {"suggestion": "open one with browser_open"},
            )
        if len(pages) == 1:
            return str(pages[0]["targetId"])
        infos = await asyncio.gather(*(self.tab_info(p) for p in pages))
        return str(next((i["id"] for i in infos if i["active"]), infos[0]["id"]))

    def forget(self, tab: str) -> None:
        self._sessions.pop(tab, None)

    async def until_event(
        self,
        tab: str,
        start: Callable[[], Any],
        done: Callable[[str, dict[str, Any]], bool],
        timeout_s: float,
        what: str,
    ) -> Any:
        """Run ``start()`` and wait until ``tab`` sends an event ``done`` accepts; returns
        what ``start`` returned."""
        session = await self.session(tab)
        seen = asyncio.Event()

        def hear(method: str, params: dict[str, Any], from_session: str | None) -> None:
            if from_session == session and done(method, params):
                seen.set()

        stop = self.cdp.listen(hear)
        try:
            started = await start()
            async with asyncio.timeout(timeout_s):
                await seen.wait()
            return started
        except TimeoutError:
            raise _timed_out(what, timeout_s) from None
        finally:
            stop()

    async def until(self, check: Callable[[], Any], timeout_s: float, what: str) -> Any:
        """Poll ``check()`` (awaitable) until it gives a true value."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = await check()
            if value:
                return value
            if time.monotonic() >= deadline:
                raise _timed_out(what, timeout_s)
            await asyncio.sleep(POLL_S)

    async def network_idle(self, tab: str, timeout_s: float) -> None:
        """Wait until no request of the tab has been in flight for ``NETWORK_IDLE_S``."""
        session = await self.session(tab)
        in_flight: set[str] = set()
        quiet_since = [time.monotonic()]

        def hear(method: str, params: dict[str, Any], from_session: str | None) -> None:
            if from_session != session:
                return
            request = str(params.get("requestId", ""))
            if method == "Network.requestWillBeSent":
                in_flight.add(request)
            elif method in ("Network.loadingFinished", "Network.loadingFailed"):
                in_flight.discard(request)
                if not in_flight:
                    quiet_since[0] = time.monotonic()

        stop = self.cdp.listen(hear)
        try:
            if tab not in self._enabled:
                await self.send(tab, "Network.enable")
                self._enabled.add(tab)

            async def quiet() -> bool:
                return not in_flight and time.monotonic() - quiet_since[0] >= NETWORK_IDLE_S

            await self.until(quiet, timeout_s, "the network to be idle")
        finally:
            stop()


def _timed_out(what: str, timeout_s: float) -> OpError:
    return OpError(
        ErrorCode.TIMEOUT,
        f"waited {timeout_s:g} s for {what}",
        {"suggestion": "look with browser_snapshot or browser_screenshot, or wait longer"},
    )
