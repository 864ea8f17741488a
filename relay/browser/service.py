"""The browser calls of ``desktop.browser``: one small handler per call, on the DevTools
channel of the desktop's browser (``pipe.py``)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import fnmatch
import json
import os
import struct
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Final

from relay.backend import DesktopBackend
from relay.browser import acts, effect, pipe
from relay.browser.cdp import CdpConnection, CdpError
from relay.browser.effect import judged
from relay.browser.endpoint import CdpClientStream
from relay.browser.find import find
from relay.browser.pagetrees import PageTrees
from relay.browser.shots import Shots, capture, guard
from relay.browser.snapshot import Element, Snapshots, Tree, plain, render
from relay.browser.tabs import Browser
from relay.desktop_tools.session import session_of
from relay.desktops.backend import VirtualBackend
from wire import a11y_match, a11y_selector
from wire import browser as rules
from wire.errors import ErrorCode, InvalidArgs, OpError
from wire.ops import RelayRow

Call = Callable[["Target", dict[str, Any]], Awaitable[dict[str, Any]]]
EVALUATE_OFF: Final = (
    f"browser_evaluate is off on this relay: start it with {rules.EVALUATE_ENV}=1 "
    "(a page's script can do anything the page can)"
)
# How long a call waits for a browser's holder to listen (it starts with the browser).
HOLDER_WAIT_S: Final = 2.0
HANDLES_KEPT: Final = 256
# Where the browser saves downloads, in the desktop's home.
DOWNLOADS: Final = "Downloads"
NO_BROWSER: Final = (
    "this desktop has no browser with a DevTools channel: start one with desktop_launch "
    "(a browser started from inside the desktop while none of the relay's ran has none)"
)


class Handles:
    """The page's handles (object ids) on elements acted on, by (tab, DOM node), the last
    ``HANDLES_KEPT``: a handle lives as long as its document, so a second act on the same
    element needs no lookup (a dead one fails its call, and the element is looked up again)."""

    def __init__(self) -> None:
        self._kept: OrderedDict[tuple[str, int], str] = OrderedDict()

    def get(self, key: tuple[str, int]) -> str | None:
        return self._kept.get(key)

    def keep(self, key: tuple[str, int], object_id: str) -> None:
        self._kept[key] = object_id
        self._kept.move_to_end(key)
        while len(self._kept) > HANDLES_KEPT:
            self._kept.popitem(last=False)


class Target:
    """One call's desktop and its browser."""

    def __init__(
        self,
        desktop_session_id: str,
        browser: Browser,
        snapshots: Snapshots,
        shots: Shots,
        trees: PageTrees,
        handles: Handles,
        home: Path | None = None,
    ) -> None:
        self.desktop_session_id = desktop_session_id
        self.browser = browser
        self.snapshots = snapshots
        self.shots = shots
        self.trees = trees
        self.handles = handles
        # The desktop's home when this relay opens file: URLs there, else None.
        self.home = home

    async def tab(self, params: dict[str, Any]) -> str:
        return await self.browser.resolve(params.get("tab"))


class BrowserService:
    """Finds a desktop's browser and runs one call on it; ``evaluate``: whether
    ``browser_evaluate`` runs (RELAYDESK_BROWSER_EVALUATE=1); ``allow_file``: whether
    ``browser_open`` opens ``file:`` URLs of the desktop's home
    (RELAYDESK_BROWSER_ALLOW_FILE=1)."""

    def __init__(self, evaluate: bool | None = None, allow_file: bool | None = None) -> None:
        self._browsers: dict[int, tuple[CdpConnection, Browser]] = {}
        self._connections: dict[Path, CdpConnection] = {}
        self.snapshots = Snapshots()
        self.shots = Shots()
        self.trees = PageTrees()
        self.handles = Handles()
        if evaluate is None:
            evaluate = os.environ.get(rules.EVALUATE_ENV, "") == "1"
        self.evaluate = evaluate
        if allow_file is None:
            allow_file = os.environ.get(rules.FILE_ENV, "") == "1"
        self.allow_file = allow_file
        self._calls: dict[str, Call] = {
            "tabs": _tabs,
            "open": _open,
            "close_tab": _close_tab,
            "history": _history,
            "snapshot": _snapshot,
            "act": _act,
            "wait": _wait,
            "screenshot": _screenshot,
            "find": _find,
            "evaluate": self._evaluate,
            "downloads": _downloads,
        }

    async def call(
        self, backend: DesktopBackend, row: RelayRow, name: str, params: dict[str, Any]
    ) -> dict[str, Any]:
        target = await self.target(backend, row)
        return await self._calls[name](target, params)

    async def run(self, target: Target, name: str, params: dict[str, Any]) -> dict[str, Any]:
        """One call on a browser already found (``target``)."""
        return await self._calls[name](target, params)

    async def page_groups(self, backend: DesktopBackend, row: RelayRow) -> list[int]:
        """The process groups of the desktop's browsers that have a DevTools channel (each
        browser leads its group; its holder serves a socket named by its pid)."""
        try:
            session = await session_of(backend, row)
        except OpError:
            return []
        assert isinstance(backend, VirtualBackend)  # session_of refuses the other kinds
        state_dir = backend.desktops.launcher.config.state_dir
        return [
            c.pid
            for c in session.processes.children
            if c.is_alive() and pipe.socket_path(state_dir, c.pid).exists()
        ]

    async def client_stream(self, backend: DesktopBackend, row: RelayRow) -> CdpClientStream:
        """A CDP client's own browser session on the desktop's browser (``endpoint.py``)."""
        session = await session_of(backend, row)
        target = await self.target(backend, row)
        downloads = session.home / DOWNLOADS
        return await CdpClientStream.open(target.browser.cdp, self.evaluate, downloads)

    async def target(self, backend: DesktopBackend, row: RelayRow) -> Target:
        """The desktop's browser (``unavailable`` when it has none with a channel)."""
        session = await session_of(backend, row)
        assert isinstance(backend, VirtualBackend)  # session_of refuses the other kinds
        state_dir = backend.desktops.launcher.config.state_dir
        cdp = await self._connection(
            [(pipe.socket_path(state_dir, c.pid), c.is_alive) for c in session.processes.children]
        )
        browser = await self._browser(cdp, session.home / DOWNLOADS)
        home = session.home if self.allow_file else None
        return Target(
            session.desktop_session_id,
            browser,
            self.snapshots,
            self.shots,
            self.trees,
            self.handles,
            home,
        )

    async def _connection(self, sockets: list[tuple[Path, Callable[[], bool]]]) -> CdpConnection:
        """The open connection to the first holder's socket of ``sockets`` that is served for
        a browser still running (each socket with its browser's ``is_alive``; a holder just
        started is given a moment to listen). A socket is looked for before its process is
        asked or a connection tried: a desktop runs a dozen processes, and each refused
        connection cost more than the rest of finding the browser (0.3 ms of 0.5)."""
        deadline = time.monotonic() + HOLDER_WAIT_S
        while True:
            for path, alive in sockets:
                if not path.exists() or not alive():
                    continue
                held = self._connections.pop(path, None)
                if held is not None and not held.closed:
                    self._connections[path] = held
                    return held
                try:
                    cdp = await CdpConnection.connect(str(path))
                except OSError:
                    continue
                self._connections[path] = cdp
                return cdp
            if time.monotonic() >= deadline:
                raise OpError(ErrorCode.UNAVAILABLE, NO_BROWSER, {"suggestion": NO_BROWSER})
            await asyncio.sleep(0.05)

    async def _browser(self, cdp: CdpConnection, downloads: Path) -> Browser:
        for key, (held, _) in list(self._browsers.items()):
            if held.closed:
                del self._browsers[key]
        if id(cdp) not in self._browsers:
            browser = Browser(cdp)
            await browser.save_downloads(downloads)
            self._browsers[id(cdp)] = (cdp, browser)
        return self._browsers[id(cdp)][1]

    async def _evaluate(self, target: Target, params: dict[str, Any]) -> dict[str, Any]:
        if not self.evaluate:
            raise OpError(ErrorCode.FORBIDDEN, EVALUATE_OFF, {"suggestion": EVALUATE_OFF})
        tab = await target.tab(params)
        expression = str(params.get("expression", ""))
        if len(expression) > rules.EXPRESSION_MAX:
            raise InvalidArgs("expression", f"at most {rules.EXPRESSION_MAX} characters")
        return {"tab": tab, "value": await target.browser.evaluate(tab, expression)}


async def _tabs(target: Target, params: dict[str, Any]) -> dict[str, Any]:
    return {"tabs": await target.browser.tabs()}


async def _navigate(browser: Browser, tab: str, url: str, timeout_s: float) -> None:
    """Send ``tab`` to ``url`` and wait for its load event (a same-document move has none)."""
    answers: list[dict[str, Any]] = []

    async def start() -> None:
        answer = await browser.send(tab, "Page.navigate", {"url": url})
        if answer.get("errorText"):
            raise OpError(
                ErrorCode.ACTION_FAILED, f"the browser could not load it: {answer['errorText']}"
            )
        answers.append(answer)

    def loaded(method: str, params: dict[str, Any]) -> bool:
        return method == "Page.loadEventFired" or (
            method == "Page.navigatedWithinDocument"
            and bool(answers)
            and not answers[0].get("loaderId")
        )

    await browser.until_event(tab, start, loaded, timeout_s, f"{url[:80]} to load")


def home_file_url(url: str, home: Path) -> str:
    """The ``file:`` URL of the file ``url`` names once its links are followed, if that is in
    ``home``; ``invalid_args`` naming ``url`` if not."""
    path = rules.file_path(url)
    if path.startswith("~/"):
        path = str(home / path[2:])
    try:  # strict: a link the relay cannot follow is not taken on trust
        real_home = os.path.realpath(home, strict=True)
        real = os.path.realpath(path, strict=True)
    except OSError as err:
        raise OpError(
            ErrorCode.NOT_FOUND,
            "a file: URL must name a file of the desktop's home that exists",
            {"field": "url"},
        ) from err
    if os.path.commonpath([real_home, real]) != real_home:
        raise InvalidArgs("url", "a file: URL must name a file of the desktop's home")
    return Path(real).as_uri()


async def _open(target: Target, params: dict[str, Any]) -> dict[str, Any]:
    url = rules.check_url(params.get("url"), allow_file=target.home is not None)
    if target.home is not None and url.lower().startswith("file:"):
        url = await asyncio.to_thread(home_file_url, url, target.home)
    timeout_s = rules.check_timeout(params.get("timeout_s", rules.TIMEOUT_DEFAULT_S))
    browser = target.browser
    if params.get("new_tab"):
        created = await browser.cdp.call("Target.createTarget", {"url": "about:blank"})
        tab = str(created["targetId"])
    else:
        tab = await target.tab(params)
    await browser.cdp.call("Target.activateTarget", {"targetId": tab})
    await _navigate(browser, tab, url, timeout_s)
    return {"tab": await browser.tab_info(await _page(browser, tab))}


async def _page(browser: Browser, tab: str) -> dict[str, Any]:
    pages = await browser.pages()
    found = next((p for p in pages if p["targetId"] == tab), None)
    if found is None:
        raise OpError(ErrorCode.NOT_FOUND, "the tab closed", {"field": "tab"})
    return found


async def _close_tab(target: Target, params: dict[str, Any]) -> dict[str, Any]:
    tab = await target.tab(params)
    browser = target.browser
    await browser.cdp.call("Target.closeTarget", {"targetId": tab})
    browser.forget(tab)

    async def gone() -> bool:  # the browser answers before the tab has left its list
        return all(p["targetId"] != tab for p in await browser.pages())

    await browser.until(gone, rules.TIMEOUT_DEFAULT_S, "the tab to close")
    return {"closed": tab, "tabs": await browser.tabs()}


async def _history(target: Target, params: dict[str, Any]) -> dict[str, Any]:
    browser, tab = target.browser, await target.tab(params)
    timeout_s = rules.check_timeout(params.get("timeout_s", rules.TIMEOUT_DEFAULT_S))
    direction = params.get("direction")
    if direction == "reload":

        async def reload() -> None:
            await browser.send(tab, "Page.reload")

        await browser.until_event(
            tab, reload, lambda m, _: m == "Page.loadEventFired", timeout_s, "the reload"
        )
    else:
        history = await browser.send(tab, "Page.getNavigationHistory")
        index = int(history["currentIndex"]) + (1 if direction == "forward" else -1)
        entries = history["entries"]
        if not 0 <= index < len(entries):
            raise OpError(
                ErrorCode.ACTION_FAILED,
                f"there is no page to go {direction} to in this tab",
                {"suggestion": "list the tabs with browser_tabs"},
            )
        entry = entries[index]
        await browser.send(tab, "Page.navigateToHistoryEntry", {"entryId": entry["id"]})
        check = f"location.href === {_js(entry['url'])} && document.readyState === 'complete'"
        await browser.until(lambda: browser.evaluate(tab, check), timeout_s, f"going {direction}")
    return {"tab": await browser.tab_info(await _page(browser, tab))}


def _js(text: str) -> str:
    """``text`` as a JavaScript string literal."""
    return json.dumps(text)


async def _snapshot(target: Target, params: dict[str, Any]) -> dict[str, Any]:
    tab = await target.tab(params)
    page = await target.trees.tree(target.browser, tab)
    snapshot = target.snapshots.new(target.desktop_session_id, tab)
    key = (
        int(params.get("depth", 64)),
        int(params.get("max_nodes", 400)),
        str(params.get("view", "interactive")),
        str(params.get("format", "text")),
    )
    result = target.trees.rendered(tab, page, key, snapshot)
    if result is None:
        result = render(page.tree, snapshot, *key)
        target.trees.keep(tab, page, key, snapshot, result)
    url, title = page.url, page.title
    if url is None or title is None:
        shown = await _page(target.browser, tab)
        url, title = shown.get("url", ""), shown.get("title", "")
    return result | {"tab": tab, "url": url, "title": title}


Act = Callable[[Browser, str, str | None, dict[str, Any]], Awaitable[dict[str, Any]]]


def _on_element(act: Callable[[Browser, str, str, dict[str, Any]], Awaitable[Any]]) -> Act:
    """An act that needs a ref's element."""

    async def run(browser: Browser, tab: str, node: str | None, params: dict[str, Any]) -> Any:
        if node is None:
            raise InvalidArgs("ref", "required")
        return await act(browser, tab, node, params)

    return run


async def _press(
    browser: Browser, tab: str, node: str | None, params: dict[str, Any]
) -> dict[str, Any]:
    key, modifiers = acts.parse_keys(str(params.get("keys", "")))
    await acts.press_key(browser, tab, key, modifiers)
    return {"pressed": params.get("keys")}


async def _scroll(
    browser: Browser, tab: str, node: str | None, params: dict[str, Any]
) -> dict[str, Any]:
    moved = rules.check_scroll(params)
    if moved is None:
        return await _on_element(lambda b, t, n, _: acts.into_view(b, t, n))(
            browser, tab, node, params
        )
    return await acts.wheel(browser, tab, node, *moved)


async def _focused(browser: Browser, tab: str, node: str) -> dict[str, Any]:
    await acts.focus(browser, tab, node)
    return {}


ACTS: Final[dict[str, Act]] = {
    "click": _on_element(lambda b, t, n, _: acts.click(b, t, n)),
    "fill": _on_element(lambda b, t, n, p: acts.fill(b, t, n, str(p.get("text", "")))),
    "press": _press,
    "select": _on_element(lambda b, t, n, p: acts.select(b, t, n, *rules.check_select(p))),
    "hover": _on_element(lambda b, t, n, _: acts.hover(b, t, n)),
    "scroll": _scroll,
    # desktop_focus on a page's element (relay/browser/routing.py)
    "focus": _on_element(lambda b, t, n, _: _focused(b, t, n)),
}


async def _act(target: Target, params: dict[str, Any]) -> dict[str, Any]:
    action = str(params.get("action"))
    act = ACTS.get(action)
    if act is None:
        raise InvalidArgs("action", f"must be one of {', '.join(rules.ACTS)}")
    ref = params.get("ref")
    browser = target.browser
    guarded = params.get("expected_revision") is not None
    if ref is None:
        if guarded:
            raise InvalidArgs("expected_revision", "guards an act on a ref only")
        return {"tab": await target.tab(params), **await _judged(target, act, None, params)}
    if not isinstance(ref, str) or not rules.REF_RE.match(ref):
        raise InvalidArgs("ref", "must be a browser ref like '@b1a2b3c4:e7'")
    snapshot, element = target.snapshots.element(ref, target.desktop_session_id)
    tab = snapshot.tab
    named = {"role": element.role, "name": element.name}  # the element the act was on
    if action == "click" and not guarded:  # checked in the click's own first call
        return {"tab": tab, **named, **await _click(target, tab, element)}
    node = await acts.resolve(browser, tab, element)
    checked = {}
    if guarded:
        shot = target.shots.get(params["expected_revision"], target.desktop_session_id, tab)
        checked = {"guard": await guard(browser, tab, node, shot)}
    if action == "press":
        await acts.focus(browser, tab, node)  # before judging: the key's effect is judged
    return {"tab": tab, **named, **await _judged(target, act, (tab, node), params), **checked}


async def _judged(
    target: Target, act: Act, on: tuple[str, str] | None, params: dict[str, Any]
) -> dict[str, Any]:
    """``act`` on the element ``on`` (tab, node) or in the tab ``params`` names, judged."""
    browser = target.browser
    tab, node = on if on is not None else (await target.tab(params), None)
    scrolling = params.get("action") == "scroll"
    answer, verdict = await judged(browser, tab, lambda: act(browser, tab, node, params), scrolling)
    if scrolling:
        answer["scroll"] = await acts.page_scroll(browser, tab)
    return {**answer, **verdict}


async def _click(target: Target, tab: str, element: Element) -> dict[str, Any]:
    """A click by ref in the fewest round trips: one call on the element (its handle kept
    from an earlier act while it lives) reads the page's state for the verdict, checks it is
    still in the page and finds its centre; the three mouse events go together."""
    browser = target.browser
    ready = None
    kept = target.handles.get((tab, element.backend_node_id))
    if kept is not None:
        with contextlib.suppress(CdpError):  # the handle died with its document
            ready = await acts.prepared(browser, tab, kept, effect.STATE)
    if ready is None:
        node = await acts.resolve(browser, tab, element, checked=False)
        ready = await acts.prepared(browser, tab, node, effect.STATE)
        if ready is None:  # gone from the page: the one element of its role and name, if any
            node = await acts.relocate(browser, tab, element)
            ready = await acts.prepared(browser, tab, node, effect.STATE)
        if ready is None:
            raise acts.stale(element)
        target.handles.keep((tab, element.backend_node_id), node)
    before, point = ready
    answer, verdict = await judged(
        browser, tab, lambda: acts.click_at(browser, tab, point), before=before
    )
    return {**answer, **verdict}


def _selector_check(target: Target, tab: str, selector: str) -> Callable[[], Awaitable[Any]]:
    """A check that is true once ``selector`` (``css:…`` or an accessibility selector)
    matches something in the page."""
    browser = target.browser
    if selector.startswith(rules.CSS_PREFIX):
        css = _js(selector[len(rules.CSS_PREFIX) :].strip())
        return lambda: browser.evaluate(tab, f"!!document.querySelector({css})")
    try:
        parsed = a11y_selector.parse(selector)
    except a11y_selector.SelectorError as err:
        raise InvalidArgs("value", str(err)) from None

    async def check() -> bool:
        roots = plain((await target.trees.tree(browser, tab)).tree)
        return bool(a11y_match.select(parsed, roots, lambda n: n["children"]))

    return check


async def _wait(target: Target, params: dict[str, Any]) -> dict[str, Any]:
    browser, tab = target.browser, await target.tab(params)
    timeout_s = rules.check_timeout(params.get("timeout_s", rules.TIMEOUT_DEFAULT_S))
    condition = params.get("for")
    value = str(params.get("value", ""))
    if condition == "load":
        ready = "document.readyState === 'complete'"
        await browser.until(lambda: browser.evaluate(tab, ready), timeout_s, "the page to load")
    elif condition == "network_idle":
        await browser.network_idle(tab, timeout_s)
    elif condition == "url":

        async def at_url() -> bool:
            url = str(await browser.evaluate(tab, "location.href"))
            return fnmatch.fnmatchcase(url, value) if "*" in value else value in url

        await browser.until(at_url, timeout_s, f"the URL to match {value[:80]!r}")
    elif condition == "selector":
        await browser.until(_selector_check(target, tab, value), timeout_s, f"{value[:80]!r}")
    else:
        raise InvalidArgs("for", f"must be one of {', '.join(rules.WAIT_FOR)}")
    return {"tab": tab, "satisfied": True, "url": str(await browser.evaluate(tab, "location.href"))}


def _png_size(data: bytes) -> tuple[int, int]:
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)


async def _screenshot(target: Target, params: dict[str, Any]) -> dict[str, Any]:
    browser, tab = target.browser, await target.tab(params)
    region, data = await capture(browser, tab, bool(params.get("full_page")))
    shot = target.shots.keep(target.desktop_session_id, tab, region, data)
    width, height = _png_size(base64.b64decode(data[:64]))
    return {
        "tab": tab,
        "format": "png",
        "image": data,
        "width": width,
        "height": height,
        "revision": shot.revision,
        "page_region": {
            "x": region.x,
            "y": region.y,
            "width": region.width,
            "height": region.height,
        },
    }


async def _find(target: Target, params: dict[str, Any]) -> dict[str, Any]:
    tab = await target.tab(params)
    selector = str(params.get("selector", ""))
    limit = int(params.get("limit", 20))
    snapshot = target.snapshots.new(target.desktop_session_id, tab)

    async def tree() -> Tree:
        return (await target.trees.tree(target.browser, tab)).tree

    matches = await find(target.browser, tab, snapshot, selector, limit, tree)
    return {"tab": tab, "snapshot": snapshot.id, "count": len(matches), "matches": matches}


async def _downloads(target: Target, params: dict[str, Any]) -> dict[str, Any]:
    return {"downloads": target.browser.downloads()}
