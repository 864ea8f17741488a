"""Did a browser act take effect? The ``effect`` verdict of ``browser_click``, ``browser_fill``
and ``browser_press``, judged in the page rather than on the screen.

Before the act the relay reads the page's state: its address, the element with the focus and
its value, and a count of the page's DOM changes (a ``MutationObserver`` the relay places once
per document). After it, it reads them again every few milliseconds for the screen's settle
window (:data:`relay.screen.effect.SETTLE_S`), which ends as soon as one differs:

- ``changed``: the page navigated (or was navigating: its context went away), its DOM changed,
  or the focus or the focused field's value did (the answer says after how many ms); for a
  scroll, also when anything in the page scrolled (a count of ``scroll`` events, kept beside
  the DOM's: other acts bring their element into view first, which is not their effect);
- ``no_visible_change``: none did within the window (a click on a dead spot, a fill with the
  value the field already had).

The observer lives in the page's own world, so a page could make its own counter move: that
only tells of a change the page chose to make, as redrawing itself would on the screen.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final, TypeVar

from relay.browser.tabs import Browser
from relay.screen.effect import SETTLE_S, Effect
from wire.errors import OpError

POLL_S: Final = 0.01
# Where the count of scroll events sits in the page's state.
SCROLLS: Final = 4
STATE: Final = (
    "(()=>{const k='__relaydeskEffect';"
    "if(!window[k]){const c={n:0};Object.defineProperty(window,k,{value:c});"
    "new MutationObserver(r=>{c.n+=r.length;}).observe(document,"
    "{subtree:true,childList:true,attributes:true,characterData:true});"
    "c.s=0;addEventListener('scroll',()=>{c.s++;},{capture:true,passive:true});}"
    "const a=document.activeElement;"
    "return [location.href,window[k].n,a?a.tagName+'#'+a.id+'/'+(a.name||''):'',"
    "a&&('value' in a)?String(a.value):null,window[k].s];})()"
)
T = TypeVar("T")


async def _state(browser: Browser, tab: str) -> list[Any] | None:
    """The page's state, or None while it has no document to ask (navigating)."""
    try:
        state = await browser.evaluate(tab, STATE)
    except OpError:
        return None
    return state if isinstance(state, list) else None


def _seen(state: list[Any] | None, scrolling: bool) -> list[Any] | None:
    """The part of the page's state an act's effect is judged on."""
    return state if state is None or scrolling else state[:SCROLLS]


async def judged(
    browser: Browser,
    tab: str,
    act: Callable[[], Awaitable[T]],
    scrolling: bool = False,
    before: list[Any] | None = None,
) -> tuple[T, dict[str, Any]]:
    """Run ``act`` and judge it: its answer and ``{effect, effect_ms}``; ``scrolling``: the
    act is a scroll (the page scrolling is its effect); ``before``: the page's state
    (:data:`STATE`) already read for it."""
    before = _seen(before if before is not None else await _state(browser, tab), scrolling)
    answer = await act()
    start = time.monotonic()
    deadline = start + SETTLE_S
    while True:
        after = _seen(await _state(browser, tab), scrolling)
        if after != before:
            effect: Effect = "changed"
            break
        if time.monotonic() >= deadline:
            effect = "no_visible_change"
            break
        await asyncio.sleep(POLL_S)
    return answer, {"effect": effect, "effect_ms": round((time.monotonic() - start) * 1000)}
