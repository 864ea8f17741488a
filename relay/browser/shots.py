"""Browser screenshots with a revision, and the guard an act carrying one passes before it runs.

``browser_screenshot`` answers a ``revision`` naming the image; the relay keeps the image (the
PNG as the browser sent it) and where on the page it was taken (a region in page coordinates,
CSS pixels). An act on an element that carries ``expected_revision`` is checked first, the
way the screen tool's stale-screen guard checks a click: the element's box on the page, with
the guard's margin (``wire.guard.bbox_margin``), is cut from the kept image and captured again
from the browser now, and the two are compared with the guard's score (``wire.guard.compare``).
Changed → ``stale_screen`` with the figures, and nothing is sent to the page; an element the
screenshot did not show is stale too (the image cannot have been what the act was chosen on).

The comparison is in page coordinates, so a page scrolled since the screenshot still passes
when the element and what is around it look the same.
"""

from __future__ import annotations

import asyncio
import base64
import io
import secrets
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
from PIL import Image

from relay.browser.tabs import Browser
from wire.errors import ErrorCode, InvalidArgs, OpError
from wire.guard import RGBArray, bbox_margin, compare

SHOTS_KEPT: Final = 16
# The element's box in page coordinates (CSS pixels), without scrolling it.
_BOX: Final = (
    "function(){const r=this.getBoundingClientRect();"
    "return [r.left+scrollX,r.top+scrollY,r.width,r.height];}"
)
_TAKE_NEW: Final = "take a new browser_screenshot"


@dataclass(frozen=True)
class Region:
    """A rectangle of the page in CSS pixels."""

    x: float
    y: float
    width: float
    height: float

    def holds(self, other: Region) -> bool:
        return (
            other.x >= self.x
            and other.y >= self.y
            and other.x + other.width <= self.x + self.width
            and other.y + other.height <= self.y + self.height
        )

    def within(self, outer: Region) -> Region:
        """This region cut to ``outer``."""
        left, top = max(self.x, outer.x), max(self.y, outer.y)
        right = min(self.x + self.width, outer.x + outer.width)
        bottom = min(self.y + self.height, outer.y + outer.height)
        return Region(left, top, max(0.0, right - left), max(0.0, bottom - top))

    def clip(self, scale: float = 1.0) -> dict[str, float]:
        return {
            "x": self.x,
            "y": self.y,
            "width": self.width,
            "height": self.height,
            "scale": scale,
        }


@dataclass(frozen=True)
class Shot:
    """A kept screenshot: whose it is, what part of the page it shows, the PNG (base64)."""

    revision: str
    desktop_session_id: str
    tab: str
    region: Region
    image: str

    def scale(self, width: int) -> float:
        """Image pixels per CSS pixel."""
        return width / self.region.width if self.region.width else 1.0


class Shots:
    """The latest browser screenshots of every desktop (the oldest are forgotten)."""

    def __init__(self) -> None:
        self._kept: OrderedDict[str, Shot] = OrderedDict()

    def keep(self, desktop_session_id: str, tab: str, region: Region, image: str) -> Shot:
        shot = Shot(f"bs{secrets.token_hex(8)}", desktop_session_id, tab, region, image)
        self._kept[shot.revision] = shot
        while len(self._kept) > SHOTS_KEPT:
            self._kept.popitem(last=False)
        return shot

    def get(self, revision: object, desktop_session_id: str, tab: str) -> Shot:
        """The kept shot ``revision`` names, of this desktop's tab."""
        if not isinstance(revision, str):
            raise InvalidArgs("expected_revision", "must be a revision from browser_screenshot")
        shot = self._kept.get(revision)
        if shot is None or shot.desktop_session_id != desktop_session_id:
            raise OpError(
                ErrorCode.REVISION_EXPIRED,
                "this desktop's browser keeps no screenshot of that revision",
                {"field": "expected_revision", "suggestion": _TAKE_NEW},
            )
        if shot.tab != tab:
            raise OpError(
                ErrorCode.REVISION_MISMATCH,
                "the screenshot shows another tab than the element's",
                {"field": "expected_revision", "suggestion": _TAKE_NEW},
            )
        return shot


async def capture(browser: Browser, tab: str, full_page: bool) -> tuple[Region, str]:
    """A PNG (base64) of what the tab shows, or of its whole page, and the region it shows."""
    metrics = await browser.send(tab, "Page.getLayoutMetrics")
    if full_page:
        size = metrics.get("cssContentSize") or metrics["contentSize"]
        region = Region(0, 0, size["width"], size["height"])
    else:
        view = metrics.get("cssVisualViewport") or metrics["visualViewport"]
        region = Region(view["pageX"], view["pageY"], view["clientWidth"], view["clientHeight"])
    request = {"format": "png", "clip": region.clip(), "captureBeyondViewport": full_page}
    answer = await browser.send(tab, "Page.captureScreenshot", request)
    return region, str(answer["data"])


def _pixels(png_base64: str) -> RGBArray:
    with Image.open(io.BytesIO(base64.b64decode(png_base64))) as image:
        return np.asarray(image.convert("RGB"), dtype=np.uint8)


def _cut(image: RGBArray, region: Region, origin: Region, scale: float) -> RGBArray:
    left, top = round((region.x - origin.x) * scale), round((region.y - origin.y) * scale)
    right = round((region.x + region.width - origin.x) * scale)
    bottom = round((region.y + region.height - origin.y) * scale)
    return image[top:bottom, left:right]


def _stale(message: str, details: dict[str, Any]) -> OpError:
    return OpError(
        ErrorCode.STALE_SCREEN,
        message,
        {**details, "field": "expected_revision", "suggestion": _TAKE_NEW},
    )


async def guard(browser: Browser, tab: str, object_id: str, shot: Shot) -> dict[str, Any]:
    """The guard's figures when the element looks as in ``shot``; ``stale_screen`` if not."""
    answer = await browser.send(
        tab,
        "Runtime.callFunctionOn",
        {"objectId": object_id, "functionDeclaration": _BOX, "returnByValue": True},
    )
    x, y, width, height = answer.get("result", {}).get("value") or (0, 0, 0, 0)
    box = Region(x, y, width, height)
    if width <= 0 or height <= 0 or not shot.region.holds(box):
        raise _stale("the screenshot does not show the element", {"difference": 1.0})
    margin = bbox_margin(round(width), round(height))
    region = Region(x - margin, y - margin, width + 2 * margin, height + 2 * margin)
    region = region.within(shot.region)
    now = await _capture_region(browser, tab, region)
    kept = await asyncio.to_thread(_pixels, shot.image)
    scale = shot.scale(kept.shape[1])
    reference = _cut(kept, region, shot.region, scale)
    current = await asyncio.to_thread(_pixels, now)
    if current.shape != reference.shape:  # rounding at another scale: compare what both have
        rows = min(current.shape[0], reference.shape[0])
        cols = min(current.shape[1], reference.shape[1])
        current, reference = current[:rows, :cols], reference[:rows, :cols]
    result = compare(np.ascontiguousarray(reference), np.ascontiguousarray(current))
    if result.stale:
        raise _stale("the page changed around the element since the screenshot", result.to_dict())
    return {"checked": True, **result.to_dict()}


async def _capture_region(browser: Browser, tab: str, region: Region) -> str:
    """``region`` of the page as it shows now (beyond the viewport when it lies outside)."""
    metrics = await browser.send(tab, "Page.getLayoutMetrics")
    view = metrics.get("cssVisualViewport") or metrics["visualViewport"]
    showing = Region(view["pageX"], view["pageY"], view["clientWidth"], view["clientHeight"])
    request = {
        "format": "png",
        "clip": region.clip(),
        "captureBeyondViewport": not showing.holds(region),
    }
    answer = await browser.send(tab, "Page.captureScreenshot", request)
    return str(answer["data"])
