"""The screen service of every display relaydesk drives: one action at a time per display.

Virtual desktops (through the relay) and the relay host's real screen (through the host
helper) run this same service: the same handlers, keys table, input backends and guard.

Each display gets a :class:`_DisplayWorker`: an asyncio lock (actions on one display are
serialised, so a guard check and the input it guards are never interleaved with another
action) and a single-thread executor that owns the display's input connection and mss
instance (neither is thread-safe). Handlers are small synchronous functions run in that
thread, dispatched from :data:`HANDLERS`.

Buttons and keys an agent holds (``mouse_down``, ``key_down``) are remembered by the display's
input backend and released when the display's connection closes: its desktop stopped or was
replaced (``release_display``, ``bind``), the display failed, or the service closed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar, cast

import numpy as np
import numpy.typing as npt
from Xlib import error as xerror

from relay.policy import DeniedApps
from relay.screen import args as check
from relay.screen.backends import (
    DEFAULT_BACKEND,
    BackendFactory,
    InputBackend,
    backend_factory,
)
from relay.screen.capture import (
    EncodedImage,
    RGBArray,
    ScreenCapture,
    encode,
    encode_screenshot,
    magnify,
)
from relay.screen.capture import preview as make_preview
from relay.screen.denied import DeniedWindows, black_out, refusal
from relay.screen.effect import around_drag, at_focus, at_point, not_judged, observed
from relay.screen.grid import draw_grid
from wire.capture import BandedPng, bgra_to_rgb
from wire.errors import ErrorCode, InvalidArgs, OpError
from wire.guard import DIGEST_DIFFERS, CropRect, Guard
from wire.screen_actions import IMAGE_ACTIONS, SCREEN_ACTIONS
from wire.screen_args import (
    DEFAULT_AMOUNT,
    IMAGE_FORMATS,
    MAX_AMOUNT,
    MAX_TEXT,
    PREVIEW_MAX_WIDTH,
    QUALITY,
    SCROLL_DIRECTIONS,
    ImageFormat,
)
from wire.screen_coords import Grid, grid_for

logger = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass
class ScreenshotResult:
    """A capture and its encodings: a screenshot, or a zoom into ``region``.

    ``capture`` is the banded PNG the server keeps, of the screen as it is (it is the image
    itself when the image is a PNG with no scaling and no grid); ``pixels`` are its
    full-resolution RGB pixels. A zoom's ``image`` shows ``region`` enlarged by ``scale``.
    """

    pixels: RGBArray
    image: EncodedImage
    capture: BandedPng
    preview: EncodedImage | None = None
    region: CropRect | None = None
    screen: tuple[int, int] | None = None
    scale: float = 1
    grid: Grid | None = None

    @property
    def width(self) -> int:
        return int(self.pixels.shape[1])

    @property
    def height(self) -> int:
        return int(self.pixels.shape[0])

    @property
    def rgb(self) -> bytes:
        """Raw RGB24 bytes, row-major, ``width * height * 3`` long."""
        return self.pixels.tobytes()

    @property
    def image_is_capture(self) -> bool:
        """Whether the image is the kept capture itself (else the capture travels beside it)."""
        return self.image.data is self.capture.data

    def to_dict(self) -> dict[str, Any]:
        result = self.image.to_dict()
        if self.preview is not None:
            small = self.preview.to_dict()
            result["preview"] = {key: small[key] for key in ("width", "height", "image")}
        if self.region is None:
            result["coordinates"] = "full_resolution"
        else:
            result["coordinates"] = "zoom"
            result["region"] = self.region.to_dict()
            result["scale"] = self.scale
        if self.screen is not None:
            result["screen"] = {"width": self.screen[0], "height": self.screen[1]}
        if self.grid is not None:
            result["grid"] = self.grid.to_dict()
        return result


@dataclass
class ScreenContext:
    """What handlers get: the display's input backend and capture, created in its thread,
    and, on a relay that denies apps, the view of their windows (``relay/policy.py``)."""

    display: str
    input: InputBackend
    capture: ScreenCapture
    max_text_length: int = MAX_TEXT
    denied: DeniedWindows | None = None

    def size(self) -> tuple[int, int]:
        return self.input.screen_size()

    def grab_bgra(
        self, region: CropRect | None = None, size: tuple[int, int] | None = None
    ) -> npt.NDArray[np.uint8]:
        """The screen (or ``region``) as captured, denied apps' windows black: where they
        were just before or just after the capture (a window moving meanwhile is black at
        both places)."""
        if self.denied is None:
            return self.capture.grab_bgra(region, size)
        before = self.denied.scene()
        bgra = self.capture.grab_bgra(region, size)
        shown = region or CropRect(0, 0, int(bgra.shape[1]), int(bgra.shape[0]))
        return black_out(bgra, shown, before, self.denied.scene())

    def grab(self, region: CropRect) -> RGBArray:
        """:meth:`grab_bgra` as RGB (what the guard compares)."""
        return bgra_to_rgb(self.grab_bgra(region))

    def check_point(self, point: tuple[int, int]) -> None:
        """``policy_denied`` when a denied app's window lies at ``point``."""
        if self.denied is not None and self.denied.point_denied(point):
            raise refusal(f"the window at ({point[0]}, {point[1]})")

    def check_focus(self) -> None:
        """``policy_denied`` when keys would reach a denied app's window."""
        if self.denied is not None and self.denied.focus_denied():
            raise refusal("the window with the keyboard focus")

    def close(self) -> None:
        self.input.close()
        self.capture.close()
        if self.denied is not None:
            self.denied.close()


Handler = Callable[[ScreenContext, dict[str, Any]], dict[str, Any]]


# -- guard -----------------------------------------------------------------------------------


# Put in place of a guard by the relay itself (never by a message: it is not JSON) for input
# at an accessibility element's live bounds, read just before (relay/a11y/service.py).
LIVE_BOUNDS: Final = object()


def check_guard(ctx: ScreenContext, args: dict[str, Any], at: tuple[int, int]) -> dict[str, Any]:
    """Compare the guard crop with the screen now; stale raises before any input is sent."""
    if args.get("guard") is LIVE_BOUNDS:
        return {"checked": False, "reason": "live accessibility bounds"}
    guard = Guard.required(args.get("guard"))
    region = guard.region_at(at, ctx.size())
    try:
        return guard.judge(ctx.grab(region))
    except OpError as err:
        if err.details.get("reason") != DIGEST_DIFFERS:  # else the server sends the crop next
            difference = err.details.get("difference")
            logger.info("stale screen on %s: difference %s", ctx.display, difference)
        raise


# -- handlers (run in the display's worker thread) --------------------------------------------


def _image_format(args: dict[str, Any]) -> tuple[ImageFormat, int | None]:
    fmt = check.choice(args, "format", IMAGE_FORMATS, "png")
    quality = check.bounded(args, "quality", *QUALITY, 80) if "quality" in args else None
    return cast(ImageFormat, fmt), quality


def _image_of(
    capture: BandedPng, shown: RGBArray, pixels: RGBArray, fmt: ImageFormat, quality: int | None
) -> EncodedImage:
    """The image of ``shown``: the capture itself when it is a PNG of the plain pixels."""
    if fmt == "png" and shown is pixels:
        return EncodedImage("png", capture.width, capture.height, capture.data)
    return encode(shown, fmt, quality)


def capture_screenshot(ctx: ScreenContext, args: dict[str, Any]) -> ScreenshotResult:
    fmt, quality = _image_format(args)
    max_width = args.get("preview_max_width")
    if max_width is not None:
        max_width = check.bounded(args, "preview_max_width", *PREVIEW_MAX_WIDTH, 0)
    size = ctx.size()
    labels = check.grid(args, size)
    capture, pixels = encode_screenshot(ctx.grab_bgra(None, size))
    shown, grid = pixels, None
    if labels is not None:  # drawn on the picture only: the capture stays the screen itself
        grid = grid_for(labels, CropRect(0, 0, *size), size)
        shown = draw_grid(pixels, grid)
    image = _image_of(capture, shown, pixels, fmt, quality)
    small = None
    if max_width is not None:
        small = encode(make_preview(shown, max_width), fmt, quality)
    return ScreenshotResult(pixels, image, capture, small, grid=grid)


def capture_zoom(ctx: ScreenContext, args: dict[str, Any]) -> ScreenshotResult:
    """A region of the screen at full resolution, enlarged by ``scale``, with its capture."""
    size = ctx.size()
    region = check.region(args, size)
    out_size = check.zoom_image_size(args, region)
    fmt, quality = _image_format(args)
    labels = check.grid(args, size)
    capture, pixels = encode_screenshot(ctx.grab_bgra(region))
    shown, grid = magnify(pixels, out_size), None
    if labels is not None:
        grid = grid_for(labels, region, out_size)
        shown = draw_grid(shown, grid)
    image = _image_of(capture, shown, pixels, fmt, quality)
    scale = args.get("scale", 1)
    return ScreenshotResult(pixels, image, capture, None, region, size, scale, grid)


def _screenshot(ctx: ScreenContext, args: dict[str, Any]) -> dict[str, Any]:
    return capture_screenshot(ctx, args).to_dict()


def _zoom(ctx: ScreenContext, args: dict[str, Any]) -> dict[str, Any]:
    return capture_zoom(ctx, args).to_dict()


def _click_n(count: int) -> Handler:
    def handler(ctx: ScreenContext, args: dict[str, Any]) -> dict[str, Any]:
        x, y = check.point(args, ctx.size())
        button = check.button(args)
        ctx.check_point((x, y))
        guard = check_guard(ctx, args, (x, y))
        ctx.input.click(x, y, button, count)
        return {"x": x, "y": y, "button": button, "guard": guard}

    return handler


def _move(ctx: ScreenContext, args: dict[str, Any]) -> dict[str, Any]:
    x, y = check.point(args, ctx.size())
    ctx.check_point((x, y))
    ctx.input.move(x, y)
    return {"x": x, "y": y}


def _drag(ctx: ScreenContext, args: dict[str, Any]) -> dict[str, Any]:
    size = ctx.size()
    start = check.point(args, size)
    end = check.point(args, size, ("to_x", "to_y"))
    button = check.button(args)
    ctx.check_point(start)
    ctx.check_point(end)
    guard = check_guard(ctx, args, start)
    ctx.input.drag(start, end, button)
    return {
        "x": start[0],
        "y": start[1],
        "to_x": end[0],
        "to_y": end[1],
        "button": button,
        "guard": guard,
    }


def _scroll(ctx: ScreenContext, args: dict[str, Any]) -> dict[str, Any]:
    direction = check.choice(args, "direction", SCROLL_DIRECTIONS, "down")
    amount = check.bounded(args, "amount", 1, MAX_AMOUNT, DEFAULT_AMOUNT)
    at = check.point(args, ctx.size()) if "x" in args or "y" in args else None
    ctx.check_point(at or ctx.input.mouse_position())
    if at is not None:
        ctx.input.move(*at)
    ctx.input.scroll(direction, amount)
    x, y = at or ctx.input.mouse_position()
    return {"direction": direction, "amount": amount, "x": x, "y": y}


def _type(ctx: ScreenContext, args: dict[str, Any]) -> dict[str, Any]:
    text = check.text(args, "text", ctx.max_text_length)
    ctx.check_focus()
    ctx.input.type_text(text)
    return {"typed": len(text)}  # never echo the text: it may be a password


def _keys(args: dict[str, Any], what: str) -> str:
    keys = args.get("keys", args.get("key"))
    if not isinstance(keys, str):
        raise InvalidArgs("keys", f"must be {what}")
    return keys


def _key(ctx: ScreenContext, args: dict[str, Any]) -> dict[str, Any]:
    keys = _keys(args, "a key chord like 'ctrl+shift+t'")
    ctx.check_focus()
    ctx.input.key(keys)
    return {"keys": keys}


def _mouse_down(ctx: ScreenContext, args: dict[str, Any]) -> dict[str, Any]:
    """Press and hold at (x, y), or where the pointer is: guarded at that point either way."""
    given = "x" in args or "y" in args
    at = check.point(args, ctx.size()) if given else ctx.input.mouse_position()
    button = check.button(args)
    ctx.check_point(at)
    guard = check_guard(ctx, args, at)
    if given:
        ctx.input.move(*at)
    ctx.input.mouse_down(button)
    return {"x": at[0], "y": at[1], "button": button, "guard": guard}


def _mouse_up(ctx: ScreenContext, args: dict[str, Any]) -> dict[str, Any]:
    at = check.point(args, ctx.size()) if "x" in args or "y" in args else None
    button = check.button(args)
    if at is not None:  # without a point it only lets go of what the agent holds
        ctx.check_point(at)
        ctx.input.move(*at)
    ctx.input.mouse_up(button)
    x, y = at or ctx.input.mouse_position()
    return {"x": x, "y": y, "button": button}


def _key_down(ctx: ScreenContext, args: dict[str, Any]) -> dict[str, Any]:
    keys = _keys(args, "one key name like 'shift' or 'a'")
    ctx.check_focus()
    ctx.input.key_down(keys)
    return {"keys": keys}


def _key_up(ctx: ScreenContext, args: dict[str, Any]) -> dict[str, Any]:
    # Not checked against denied apps: it only lets go of a key (the X server ignores the
    # release of a key that is up), and a key left held would stay held in their window.
    keys = _keys(args, "one key name like 'shift' or 'a'")
    ctx.input.key_up(keys)
    return {"keys": keys}


def _mouse_position(ctx: ScreenContext, args: dict[str, Any]) -> dict[str, Any]:
    x, y = ctx.input.mouse_position()
    return {"x": x, "y": y}


def _screen_size(ctx: ScreenContext, args: dict[str, Any]) -> dict[str, Any]:
    width, height = ctx.size()
    return {"width": width, "height": height}


def _keyboard_state(ctx: ScreenContext, args: dict[str, Any]) -> dict[str, Any]:
    return dict(ctx.input.keyboard_state())


def _release_held(ctx: ScreenContext, args: dict[str, Any]) -> None:
    ctx.input.release_held()


HANDLERS: dict[str, Handler] = {
    "screenshot": _screenshot,
    "zoom": _zoom,
    "click": observed(_click_n(1), at_point),
    "double_click": observed(_click_n(2), at_point),
    "move": not_judged(_move),
    "drag": observed(_drag, around_drag),
    "scroll": observed(_scroll, at_point),
    "type": observed(_type, at_focus),
    "key": observed(_key, at_focus),
    "mouse_position": _mouse_position,
    "screen_size": _screen_size,
    "keyboard_state": _keyboard_state,
    "mouse_down": observed(_mouse_down, at_point),
    "mouse_up": observed(_mouse_up, at_point),
    "key_down": observed(_key_down, at_focus),
    "key_up": observed(_key_up, at_focus),
}
assert set(HANDLERS) == set(SCREEN_ACTIONS)


# -- per-display worker ----------------------------------------------------------------------


@dataclass
class _DisplayWorker:
    display: str
    factory: BackendFactory
    max_text_length: int
    denied_apps: DeniedApps = field(default_factory=DeniedApps)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    context: ScreenContext | None = None

    def __post_init__(self) -> None:
        prefix = f"screen{self.display}"
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=prefix)

    def _context(self) -> ScreenContext:
        if self.context is None:
            denied = (
                DeniedWindows.open(self.display, self.denied_apps) if self.denied_apps else None
            )
            try:
                backend = self.factory(self.display)
            except BaseException:
                if denied is not None:
                    denied.close()
                raise
            try:
                capture = ScreenCapture(self.display)
            except BaseException:
                backend.close()
                if denied is not None:
                    denied.close()
                raise
            self.context = ScreenContext(
                self.display, backend, capture, self.max_text_length, denied
            )
        return self.context

    def _call(self, fn: Callable[[ScreenContext, dict[str, Any]], T], args: dict[str, Any]) -> T:
        try:
            return fn(self._context(), args)
        except (xerror.ConnectionClosedError, xerror.XError, OSError) as err:
            # The display went away (desktop stopped/restarted): reopen on the next action.
            self.close_context()
            raise OpError(ErrorCode.UNAVAILABLE, f"display {self.display} failed: {err}") from err

    async def call(
        self, fn: Callable[[ScreenContext, dict[str, Any]], T], args: dict[str, Any]
    ) -> T:
        async with self.lock:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self.executor, self._call, fn, args)

    def close_context(self) -> None:
        if self.context is not None:
            context, self.context = self.context, None
            context.close()

    def shutdown(self) -> None:
        try:
            self.executor.submit(self.close_context).result()
        finally:
            self.executor.shutdown(wait=True)


class ScreenService:
    """Runs screen actions on a relay's displays (one service per relay).

    ``denied``: the apps whose windows agents may neither see nor touch (``relay/policy.py``);
    by default the process's ``RELAYDESK_DENY_APPS``, which the relay and the host helper
    read like every other setting of theirs.
    """

    def __init__(
        self,
        input_backend: str = DEFAULT_BACKEND,
        max_text_length: int = MAX_TEXT,
        denied: DeniedApps | None = None,
    ) -> None:
        self._factory = backend_factory(input_backend)
        self._max_text_length = max_text_length
        self._denied = DeniedApps.from_env() if denied is None else denied
        self._workers: dict[str, _DisplayWorker] = {}
        # Which desktop session each display's connections were opened for: a new desktop on
        # a reused display number never inherits the connections of the one before it.
        self._sessions: dict[str, str] = {}
        self._closed = False

    def _worker(self, display: object) -> _DisplayWorker:
        if self._closed:
            raise OpError(ErrorCode.UNAVAILABLE, "the screen service is closed")
        # The backend judges the name when it opens the display (an X display for XTEST; for
        # pyautogui off X11, "" is the screen of the process).
        if not isinstance(display, str):
            raise InvalidArgs("display", "must be a display name")
        name = display
        worker = self._workers.get(name)
        if worker is None:
            worker = _DisplayWorker(name, self._factory, self._max_text_length, self._denied)
            self._workers[name] = worker
        return worker

    async def run(self, display: str, action: str, args: dict[str, Any]) -> dict[str, Any]:
        """Run one action; returns its JSON-safe result or raises ``OpError``."""
        handler = HANDLERS.get(action)
        if handler is None:
            raise InvalidArgs("action", f"unknown screen action {action!r}")
        if not isinstance(args, dict):
            raise InvalidArgs("args", "must be an object")
        logger.debug("screen %s on %s", action, display)
        return await self._worker(display).call(handler, args)

    async def answer(self, display: str, action: str, args: dict[str, Any]) -> dict[str, Any]:
        """Like :meth:`run`, as a remote caller gets it: a screenshot or zoom also carries
        ``capture`` (where its PNG's row bands start, plus that lossless PNG when the image is
        not it: lossy, enlarged or with a grid)."""
        if action not in IMAGE_ACTIONS:
            return await self.run(display, action, args)
        if not isinstance(args, dict):
            raise InvalidArgs("args", "must be an object")
        capture_fn = capture_zoom if action == "zoom" else capture_screenshot
        shot = await self._worker(display).call(capture_fn, args)
        capture = shot.capture.to_wire(with_png=not shot.image_is_capture)
        return {**shot.to_dict(), "capture": capture}

    async def run_in_display(self, display: str, fn: Callable[[ScreenContext], T]) -> T:
        """``fn`` in the display's worker, serialised with its actions (benchmark baselines)."""
        return await self._worker(display).call(lambda ctx, _args: fn(ctx), {})

    async def screenshot(self, display: str, args: dict[str, Any]) -> ScreenshotResult:
        """Like ``run(display, "screenshot", args)`` but keeps the raw RGB capture."""
        return await self._worker(display).call(capture_screenshot, args)

    async def bind(self, display: str, desktop_session_id: str) -> None:
        """Actions on ``display`` now serve ``desktop_session_id``: connections opened for an
        earlier desktop on the same display number (stopped, then restarted) are closed first."""
        name = check.display_name(display)
        previous = self._sessions.get(name)
        self._sessions[name] = desktop_session_id
        if previous is not None and previous != desktop_session_id:
            await self.release_display(name)

    async def release_held(self, display: str) -> None:
        """Release the buttons and keys the agent left held on ``display`` (mouse_down,
        key_down); a display without an open connection holds nothing."""
        worker = self._workers.get(display)
        if worker is not None and worker.context is not None:
            await worker.call(_release_held, {})

    async def release_display(self, display: str) -> None:
        """Forget a display (its desktop stopped): close its connections and thread."""
        worker = self._workers.pop(display, None)
        if worker is not None:
            async with worker.lock:
                await asyncio.to_thread(worker.shutdown)

    def close(self) -> None:
        """Close every display's connections and threads (waits for running actions)."""
        self._closed = True
        workers, self._workers = list(self._workers.values()), {}
        for worker in workers:
            try:
                worker.shutdown()
            except Exception:
                logger.exception("closing screen worker for %s failed", worker.display)

    async def aclose(self) -> None:
        """:meth:`close` without blocking the event loop."""
        await asyncio.to_thread(self.close)
