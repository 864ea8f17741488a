"""The accessibility tools on a browser's pages: the page content over DevTools, the browser's
own chrome over AT-SPI (docs/browser.md, "Routing").

``desktop_observe`` and ``desktop_find`` on a window of a browser that has a DevTools channel
(its app's process is in the group the relay's browser leads) ask the accessibility worker for
the window without its pages (``relay/a11y/trees.py``: the walk stops at each page's root),
then read the page the window shows over DevTools and put it where the page's root was: the
tabs strip, the address bar and the browser's dialogs keep their AT-SPI refs (``@<id>:e<n>``),
the page's elements get browser refs (``@b<id>:e<n>``). Every answer says which backend
served it (``backend``; each JSON element and each match says its own). The element actions
(``desktop_click``, ``desktop_type``, ``desktop_key``, ``desktop_scroll``, ``desktop_focus``,
``desktop_read``) take either kind of ref: a browser ref runs as the browser tool of the same
act (``relay/browser/service.py``), found again live, with the page's effect verdict.
``desktop_wait`` where a browser shows pages is that routed find, looked at again until its
first match meets the condition.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Final

from relay.a11y.service import A11yService
from relay.a11y.trees import PAGE_GROUPS
from relay.backend import DesktopBackend
from relay.browser import acts
from relay.browser.service import BrowserService, Target
from relay.browser.snapshot import role_of, states
from relay.browser.tabs import Browser
from wire import browser as rules
from wire.errors import ErrorCode, InvalidArgs, OpError
from wire.ops import RelayRow

# The calls whose answer may hold a browser's pages.
PAGE_CALLS: Final = frozenset({"observe", "find"})
# The calls routed by what the window shows: those, and ``wait`` (a find until it holds).
ROUTED_CALLS: Final = PAGE_CALLS | {"wait"}
# How often a wait that a page takes part in looks again (a page's find: a few ms).
WAIT_CHECK_S: Final = 0.1
WAIT_ADVICE: Final = "look at what desktop_find matches now, or wait longer (timeout_ms)"
# The calls on one element, named by its ref.
ELEMENT_CALLS: Final = frozenset({"act", "read"})
# One step of desktop_scroll's wheel on a page, in CSS pixels (Chromium's own step).
WHEEL_STEP_PX: Final = 100
DIRECTIONS: Final[dict[str, tuple[int, int]]] = {
    "down": (0, 1),
    "up": (0, -1),
    "right": (1, 0),
    "left": (-1, 0),
}


class PageRouting:
    """``desktop.a11y`` calls, each served by the backend that knows its part of the window."""

    def __init__(self, a11y: A11yService, browser: BrowserService) -> None:
        self.a11y = a11y
        self.browser = browser

    async def call(
        self, backend: DesktopBackend, row: RelayRow, call: str, params: dict[str, Any]
    ) -> dict[str, Any]:
        if call in ELEMENT_CALLS and _browser_ref(params.get("ref")):
            target = await self.browser.target(backend, row)
            return await self._element(target, call, params) | {"backend": "cdp"}
        routed = call in ROUTED_CALLS and params.get("backend", "auto") == "auto"
        groups = await self.browser.page_groups(backend, row) if routed else []
        if call == "wait" and groups:
            return await self._wait(backend, row, params)
        asked = {k: v for k, v in params.items() if k != "backend"}
        asked |= {PAGE_GROUPS: groups} if groups else {}
        result = await self.a11y.call(backend, row, call, asked)
        pages = result.pop("pages", None)
        _mark(result, "atspi")
        if pages:
            try:
                target = await self.browser.target(backend, row)
            except OpError as err:  # a channel that went away (its holder killed): AT-SPI alone
                if err.code is not ErrorCode.UNAVAILABLE:
                    raise
                return await self.call(backend, row, call, params | {"backend": "atspi"})
            if call == "observe":
                await self._observe_pages(target, result, pages, params)
            else:
                await self._find_pages(target, result, pages, params)
        return result

    async def _wait(
        self, backend: DesktopBackend, row: RelayRow, params: dict[str, Any]
    ) -> dict[str, Any]:
        """``desktop_wait`` where a browser shows pages: the routed find, again every
        ``WAIT_CHECK_S``, until its first match meets the condition (the AT-SPI worker's
        ``wait`` answers, and fails, the same way)."""
        condition = str(params.get("condition", "exists"))
        timeout_s = float(params.get("timeout_ms", 5000)) / 1000
        asked = {k: params[k] for k in ("selector", "app", "window") if k in params}
        started = time.monotonic()
        checks = 0
        while True:
            checks += 1
            try:
                found = await self.call(backend, row, "find", asked | {"limit": 1})
            except OpError as err:
                if err.code is not ErrorCode.APP_NOT_FOUND:
                    raise
                found = {"matches": []}
            first = found["matches"][0] if found["matches"] else None
            if _met(condition, first):
                done = {
                    "satisfied": True,
                    "condition": condition,
                    "checks": checks,
                    "elapsed_ms": round((time.monotonic() - started) * 1000),
                }
                return done | (found if first is not None else {"backend": found["backend"]})
            left = started + timeout_s - time.monotonic()
            if left <= 0:
                raise OpError(
                    ErrorCode.TIMEOUT,
                    f"{condition} not reached for {str(params.get('selector'))!r} "
                    f"in {timeout_s:g} s",
                    {"suggestion": WAIT_ADVICE, "checks": checks},
                )
            await asyncio.sleep(min(left, WAIT_CHECK_S))

    async def _observe_pages(
        self,
        target: Target,
        result: dict[str, Any],
        pages: list[dict[str, Any]],
        params: dict[str, Any],
    ) -> None:
        """Each page's root line replaced by the page as the browser reads it (or the page
        put after the window, for a browser whose renderer has no tree on the bus)."""
        lines = result["text"].split("\n") if "text" in result else None
        items = result.get("elements")
        room = int(params.get("max_nodes", 400)) - int(result["nodes"])
        depth = int(params.get("depth", 24))
        served = []
        for page in reversed(pages):  # from the last, so earlier lines keep their index
            tab = await _tab_of(target.browser, str(page["window"]))
            if tab is None:
                continue
            line, level = int(page["line"]), int(page["level"])
            end = line + 1 if page.get("replace", True) else line
            seen = await self.browser.run(
                target,
                "snapshot",
                {
                    "tab": tab,
                    "depth": max(1, depth - level),
                    "max_nodes": max(1, room + 1),
                    "view": params.get("view", "interactive"),
                    "format": params.get("format", "text"),
                },
            )
            room -= int(seen["nodes"]) - (end - line)
            if lines is not None:
                indent = "  " * level
                lines[line:end] = [indent + x for x in seen["text"].split("\n") if x]
            if items is not None:
                items[line:end] = [
                    i | {"depth": i["depth"] + level, "backend": "cdp"} for i in seen["elements"]
                ]
            cut = seen["truncated"]
            result["truncated"] = {k: v or cut[k] for k, v in result["truncated"].items()}
            served.append(
                {"backend": "cdp", "tab": tab, "url": seen["url"], "snapshot": seen["snapshot"]}
            )
        if lines is not None:
            result["text"] = "\n".join(lines)
        result["nodes"] = len(lines) if lines is not None else len(items or [])
        result["pages"] = served[::-1]

    async def _find_pages(
        self,
        target: Target,
        result: dict[str, Any],
        pages: list[dict[str, Any]],
        params: dict[str, Any],
    ) -> None:
        """The matches in each page the browser shows, after the chrome's."""
        limit = int(params.get("limit", 20))
        matches: list[dict[str, Any]] = result["matches"]
        for page in pages:
            tab = await _tab_of(target.browser, str(page["window"]))
            if tab is None or len(matches) >= limit:
                continue
            found = await self.browser.run(
                target,
                "find",
                {"tab": tab, "selector": params.get("selector"), "limit": limit - len(matches)},
            )
            matches += [
                m | {"bounds": None, "app": page["app"], "backend": "cdp"} for m in found["matches"]
            ]
        result["count"] = len(matches)
        result["more"] = bool(result.get("more")) or len(matches) >= limit
        if any(m["backend"] == "cdp" for m in matches):
            result["backend"] = "cdp" if all(m["backend"] == "cdp" for m in matches) else "mixed"

    async def _element(self, target: Target, call: str, params: dict[str, Any]) -> dict[str, Any]:
        """A desktop element action on a page's element: the browser tool of the same act."""
        ref = str(params["ref"])
        if call == "read":
            return await _read(target, ref)
        action = str(params.get("action"))
        asked: dict[str, Any] = {"ref": ref, "action": action}
        if action == "type":
            text = str(params.get("text", ""))
            if params.get("mode") == "append":
                text = str((await _read(target, ref)).get("value") or "") + text
            asked |= {"action": "fill", "text": text}
        elif action == "key":
            asked |= {"action": "press", "keys": params.get("keys", "")}
        elif action == "scroll" and not params.get("into_view"):
            dx, dy = DIRECTIONS.get(str(params.get("direction", "down")), (0, 1))
            step = WHEEL_STEP_PX * int(params.get("amount", 3))
            asked |= {"dx": dx * step, "dy": dy * step}
        elif action not in ("click", "scroll", "focus"):
            raise InvalidArgs("action", f"unknown act {action[:32]!r}")
        done = await self.browser.run(target, "act", asked)
        answer = {"method": "cdp", "effect": done["effect"], "tab": done["tab"]}
        answer |= {k: done[k] for k in ("role", "name") if k in done}
        answer |= {"effect_ms": done["effect_ms"]} if "effect_ms" in done else {}
        if "at" in done:  # CSS pixels of the page, not of the screen
            answer["page_at"] = done["at"]
        if action == "type":
            answer |= {"text": done["value"], "confirmed": done["value"] == asked["text"]}
        return answer


def _met(condition: str, match: dict[str, Any] | None) -> bool:
    """Whether the first match (None: nothing matched) meets a wait's ``condition``; a page's
    element is visible unless its tree says it is hidden (the tree lists no other)."""
    if condition == "gone":
        return match is None
    if match is None:
        return False
    states = set(match.get("states") or ())
    if condition == "visible":
        return (
            "hidden" not in states
            if match["backend"] == "cdp"
            else {"showing", "visible"} <= states
        )
    if condition == "enabled":
        return "enabled" in states or "sensitive" in states
    if condition == "focused":
        return "focused" in states
    return True


def _browser_ref(ref: object) -> bool:
    return isinstance(ref, str) and bool(rules.REF_RE.match(ref))


def _mark(result: dict[str, Any], backend: str) -> None:
    """Say which backend served the answer and each element it lists."""
    result["backend"] = backend
    for key in ("elements", "matches"):
        for item in result.get(key) or ():
            item.setdefault("backend", backend)


async def _tab_of(browser: Browser, window: str) -> str | None:
    """The tab a browser window shows: a showing tab whose title starts the window's
    (Chromium's is ``<title> - Chromium``), else the first showing one."""
    tabs = await browser.tabs()
    showing = [t for t in tabs if t["active"]] or tabs
    for tab in showing:
        if tab["title"] and window.startswith(str(tab["title"])):
            return str(tab["id"])
    return str(showing[0]["id"]) if showing else None


async def _read(target: Target, ref: str) -> dict[str, Any]:
    """``desktop_read`` of a page's element: what the browser's tree says of it now."""
    snapshot, element = target.snapshots.element(ref, target.desktop_session_id)
    browser, tab = target.browser, snapshot.tab
    object_id = await acts.resolve(browser, tab, element)
    described = await browser.send(tab, "DOM.describeNode", {"objectId": object_id})
    partial = await browser.send(
        tab,
        "Accessibility.getPartialAXTree",
        {"backendNodeId": described["node"]["backendNodeId"], "fetchRelatives": False},
    )
    node: dict[str, Any] = next(iter(partial.get("nodes", [])), {})
    value = (node.get("value") or {}).get("value")
    return {
        "ref": ref,
        "role": role_of(node) if node else element.role,
        "name": str((node.get("name") or {}).get("value", element.name)),
        "states": states(node) if node else [],
        "value": None if value is None else str(value),
        "bounds": None,
        "tab": tab,
    }
