"""Screen actions on the host display: XTEST input and mss capture, one worker thread.

A compact sibling of the relay's screen service (the helper may not import it). Actions run
one at a time in a single thread that owns the display connection and the mss instance
(neither is thread-safe), so a guard check and the input it guards are never interleaved with
another action. Guarded clicks and drags (at their start point) compare with ``wire.guard``
before any input is sent.

Input backends, chosen by ``HelperConfig.input_backend`` (``--input-backend``,
``RELAYDESK_INPUT_BACKEND``): ``xtest`` (default, :class:`XScreen`) and ``pyautogui`` (for a
screen that is not an X display, ``host_helper.pyautogui_screen``). Both are tested here
against Xvfb; the handlers below use only the :class:`Screen` methods.
"""

from __future__ import annotations

import asyncio
import base64
import importlib
import logging
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, Protocol

import mss
import numpy as np
from Xlib import XK, X
from Xlib import error as xerror
from Xlib.display import Display
from Xlib.ext import xtest

from wire.capture import bgra_to_rgb, encode_png
from wire.errors import ErrorCode, InvalidArgs, OpError
from wire.guard import STALE_THRESHOLD, CropRect, RGBArray, compare, decode_crop

log = logging.getLogger(__name__)

ACTIONS = ("screenshot", "click", "double_click", "move", "drag", "scroll", "type", "key",
           "mouse_position", "screen_size", "keyboard_state")  # fmt: skip
BUTTONS: dict[Any, int] = {"left": 1, "middle": 2, "right": 3, 1: 1, 2: 2, 3: 3}
SCROLL_BUTTONS = {"up": 4, "down": 5, "left": 6, "right": 7}
LED_CAPS_LOCK, LED_NUM_LOCK, LED_SCROLL_LOCK = 0x1, 0x2, 0x4
MAX_TEXT = 10_000
DOUBLE_CLICK_GAP_S = 0.04
# The relay's XTEST backend drags the same way (relay/screen/xinput.py).
DRAG_STEPS = 12
DRAG_DURATION_S = 0.12
REMAP_RESTORE_DELAY_S = 0.05
ALIASES = {
    "ctrl": "Control_L", "control": "Control_L", "shift": "Shift_L", "alt": "Alt_L",
    "super": "Super_L", "win": "Super_L", "cmd": "Super_L", "meta": "Meta_L",
    "enter": "Return", "esc": "Escape", "backspace": "BackSpace", "del": "Delete",
    "pageup": "Prior", "pagedown": "Next", "space": "space", "tab": "Tab",
}  # fmt: skip


def _int(args: dict[str, Any], name: str) -> int:
    value = args.get(name)
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidArgs(name, "must be an integer")
    return value


def _point(
    args: dict[str, Any], size: tuple[int, int], names: tuple[str, str] = ("x", "y")
) -> tuple[int, int]:
    x, y = _int(args, names[0]), _int(args, names[1])
    for name, value, limit in zip(names, (x, y), size, strict=True):
        if not 0 <= value < limit:
            raise InvalidArgs(name, f"({x}, {y}) is outside the {size[0]}x{size[1]} screen")
    return x, y


def _button(args: dict[str, Any]) -> int:
    value = args.get("button", "left")
    key = value.casefold() if isinstance(value, str) else value
    if isinstance(key, bool) or key not in BUTTONS:
        raise InvalidArgs("button", "must be left, middle or right")
    return BUTTONS[key]


def keysym_of(name: str) -> int:
    """A key name (``Return``, ``ctrl``, ``a``, ``F4``) → keysym; unknown → ``InvalidArgs``."""
    keysym = XK.string_to_keysym(ALIASES.get(name.casefold(), name))
    if not keysym and len(name) == 1:
        keysym = char_keysym(name)
    if not keysym:
        raise InvalidArgs("keys", f"unknown key {name!r}")
    return int(keysym)


def char_keysym(char: str) -> int:
    special = {"\n": XK.XK_Return, "\t": XK.XK_Tab}
    if char in special:
        return int(special[char])
    code = ord(char)
    return code if 0x20 <= code <= 0x7E or 0xA0 <= code <= 0xFF else 0x01000000 | code


class Screen(Protocol):
    """What the action handlers need of an input backend and its capture (one thread only)."""

    def size(self) -> tuple[int, int]: ...
    def grab(self, rect: CropRect | None = None) -> RGBArray: ...
    def move(self, x: int, y: int) -> None: ...
    def click(self, x: int, y: int, button: int, count: int) -> None: ...
    def drag(self, start: tuple[int, int], end: tuple[int, int], button: int) -> None: ...
    def scroll(self, direction: str, amount: int) -> None: ...
    def type_text(self, text: str) -> None: ...
    def key(self, chord: str) -> None: ...
    def mouse_position(self) -> tuple[int, int]: ...
    def keyboard_state(self) -> dict[str, Any]: ...
    def close(self) -> None: ...


# The one place a backend name maps to its class; imported when chosen (pyautogui opens the
# screen on import).
BACKENDS = {
    "xtest": "host_helper.screen:XScreen",
    "pyautogui": "host_helper.pyautogui_screen:PyAutoGuiScreen",
}


def open_screen(backend: str, display: str) -> Screen:
    """An instance of ``backend`` on ``display``."""
    module_name, _, attribute = BACKENDS[backend].partition(":")
    factory: Callable[[str], Screen] = getattr(importlib.import_module(module_name), attribute)
    return factory(display)


class MssCapture:
    """mss capture of one screen, as RGB (how both backends capture)."""

    def __init__(self, display_name: str | None) -> None:
        factory = getattr(mss, "MSS", None) or mss.mss
        self._mss = factory(**({"display": display_name} if display_name else {}))

    def grab(self, rect: CropRect) -> RGBArray:
        shot = self._mss.grab(rect.to_dict() | {"left": rect.x, "top": rect.y})
        return bgra_to_rgb(np.asarray(shot))

    def close(self) -> None:
        self._mss.close()


class XScreen:
    """XTEST input and mss capture on one X display (used from one thread only)."""

    def __init__(self, display_name: str) -> None:
        try:
            self.display = Display(display_name)
        except (xerror.DisplayError, xerror.ConnectionClosedError, OSError) as err:
            raise OpError(ErrorCode.UNAVAILABLE, f"cannot open display {display_name}") from err
        if not self.display.has_extension("XTEST"):
            self.display.close()
            raise OpError(ErrorCode.UNAVAILABLE, f"display {display_name} has no XTEST")
        self.root = self.display.screen().root
        self.capture = MssCapture(display_name)

    def size(self) -> tuple[int, int]:
        geometry = self.root.get_geometry()
        return int(geometry.width), int(geometry.height)

    def grab(self, rect: CropRect | None = None) -> RGBArray:
        return self.capture.grab(rect or CropRect(0, 0, *self.size()))

    def fake(self, event_type: int, detail: int = 0, x: int = 0, y: int = 0) -> None:
        if event_type == X.MotionNotify:
            xtest.fake_input(self.display, event_type, x=x, y=y)
        else:
            xtest.fake_input(self.display, event_type, detail)

    def move(self, x: int, y: int) -> None:
        self.fake(X.MotionNotify, x=x, y=y)
        self.display.sync()

    def scroll(self, direction: str, amount: int) -> None:
        for _ in range(amount):
            self.fake(X.ButtonPress, SCROLL_BUTTONS[direction])
            self.fake(X.ButtonRelease, SCROLL_BUTTONS[direction])
        self.display.sync()

    def mouse_position(self) -> tuple[int, int]:
        pointer = self.root.query_pointer()
        return int(pointer.root_x), int(pointer.root_y)

    def click(self, x: int, y: int, button: int, count: int) -> None:
        self.fake(X.MotionNotify, x=x, y=y)
        for index in range(count):
            if index:
                self.display.sync()
                time.sleep(DOUBLE_CLICK_GAP_S)
            self.fake(X.ButtonPress, button)
            self.fake(X.ButtonRelease, button)
        self.display.sync()

    def drag(self, start: tuple[int, int], end: tuple[int, int], button: int) -> None:
        """Press at ``start``, move in interpolated steps, release at ``end``."""
        self.fake(X.MotionNotify, x=start[0], y=start[1])
        self.fake(X.ButtonPress, button)
        self.display.sync()
        for step in range(1, DRAG_STEPS + 1):
            # Toolkits start a drag only after motion past a threshold while pressed;
            # intermediate points with pauses look like a hand-made drag.
            x = start[0] + (end[0] - start[0]) * step // DRAG_STEPS
            y = start[1] + (end[1] - start[1]) * step // DRAG_STEPS
            self.fake(X.MotionNotify, x=x, y=y)
            self.display.sync()
            time.sleep(DRAG_DURATION_S / DRAG_STEPS)
        self.fake(X.ButtonRelease, button)
        self.display.sync()

    def stroke(self, keysym: int) -> tuple[int, bool] | None:
        """(keycode, needs shift) typing ``keysym`` on level 0 or 1, or None when unmapped."""
        for code, index in sorted(self.display.keysym_to_keycodes(keysym), key=lambda e: e[1]):
            if index in (0, 1):
                return code, index == 1
        return None

    @contextmanager
    def remapped(self, keysyms: list[int]) -> Iterator[dict[int, int]]:
        """Bind unmapped keysyms to spare keycodes for the block, then restore them."""
        info = self.display.display.info
        first = info.min_keycode
        rows = self.display.get_keyboard_mapping(first, info.max_keycode - first + 1)
        spares = [first + i for i, row in reversed(list(enumerate(rows))) if not any(row)]
        if len(keysyms) > len(spares):
            raise InvalidArgs("text", "too many distinct characters outside the keyboard layout")
        bound = dict(zip(keysyms, spares, strict=False))
        width = len(rows[0]) if rows else 2
        for keysym, code in bound.items():
            self.display.change_keyboard_mapping(code, [[keysym] * 2 + [X.NoSymbol] * (width - 2)])
        self.display.sync()
        try:
            yield bound
        finally:
            self.display.sync()
            time.sleep(REMAP_RESTORE_DELAY_S)  # clients re-read the keymap after MappingNotify
            for code in bound.values():
                self.display.change_keyboard_mapping(code, [[X.NoSymbol] * width])
            self.display.sync()

    def tap(self, code: int, shifted: bool, held: tuple[int, ...] = ()) -> None:
        shift = self.stroke(XK.XK_Shift_L) if shifted else None
        mods = (*held, *([shift[0]] if shift else []))
        for mod in mods:
            self.fake(X.KeyPress, mod)
        self.fake(X.KeyPress, code)
        self.fake(X.KeyRelease, code)
        for mod in reversed(mods):
            self.fake(X.KeyRelease, mod)

    def type_text(self, text: str) -> None:
        keysyms = [char_keysym(char) for char in text]
        missing = list(dict.fromkeys(k for k in keysyms if self.stroke(k) is None))
        with self.remapped(missing) if missing else _nothing() as bound:
            for keysym in keysyms:
                stroke = (bound[keysym], False) if keysym in bound else self.stroke(keysym)
                if stroke is not None:
                    self.tap(*stroke)
        self.display.sync()

    def key(self, chord: str) -> None:
        parts = [part.strip() for part in chord.split("+")]
        if not all(parts):
            raise InvalidArgs("keys", f"empty key name in {chord!r}")
        keysyms = [keysym_of(part) for part in parts]
        strokes = [self.stroke(keysym) for keysym in keysyms]
        if any(stroke is None for stroke in strokes):
            raise InvalidArgs("keys", f"{chord!r} has a key this keyboard layout lacks")
        modifiers = tuple(stroke[0] for stroke in strokes[:-1] if stroke is not None)
        last = strokes[-1]
        assert last is not None
        self.tap(last[0], last[1], modifiers)
        self.display.sync()

    def keyboard_state(self) -> dict[str, Any]:
        leds = int(self.display.get_keyboard_control().led_mask)
        return {
            "num_lock": bool(leds & LED_NUM_LOCK),
            "caps_lock": bool(leds & LED_CAPS_LOCK),
            "scroll_lock": bool(leds & LED_SCROLL_LOCK),
            "source": "led_mask",
        }

    def close(self) -> None:
        self.capture.close()
        self.display.close()


@contextmanager
def _nothing() -> Iterator[dict[int, int]]:
    yield {}


# -- actions (run in the worker thread) ------------------------------------------------------


def check_guard(screen: Screen, args: dict[str, Any], at: tuple[int, int]) -> dict[str, Any]:
    """Compare the server's reference crop with the screen now; stale → no input at all."""
    guard = args.get("guard")
    if guard is None:
        # Only the server holds the screenshot a click was chosen on: an action without its
        # reference crop could not have been checked, so it does not run (the server always
        # sends one; anything else reaching this op is refused).
        raise InvalidArgs("guard", "required: a click or drag runs only behind the screen guard")
    if not isinstance(guard, dict):
        raise InvalidArgs("guard", "must be an object with crop and rect")
    crop = decode_crop(guard.get("crop"), "guard.crop")
    rect = CropRect.from_dict(guard.get("rect"), "guard.rect")
    if crop.shape[:2] != (rect.height, rect.width) or not rect.contains(at):
        raise InvalidArgs("guard.rect", "must match the crop and contain the point")
    if not rect.fits(screen.size()):
        details = {"difference": 1.0, "threshold": STALE_THRESHOLD}
        raise OpError(ErrorCode.STALE_SCREEN, "the screen size changed", details)
    result = compare(crop, screen.grab(rect))
    if result.stale:
        raise OpError(
            ErrorCode.STALE_SCREEN,
            "the screen changed around the target since the screenshot; take a new one",
            {**result.to_dict(), "rect": rect.to_dict()},
        )
    return {"checked": True, **result.to_dict()}


def _screenshot(screen: Screen, args: dict[str, Any]) -> dict[str, Any]:
    # The banded PNG is both the image and the capture the server keeps (wire.capture).
    png, _ = encode_png(screen.grab())
    image = base64.b64encode(png.data).decode("ascii")
    return {"width": png.width, "height": png.height, "format": "png", "image": image,
            "coordinates": "full_resolution", "capture": png.to_wire(with_png=False)}  # fmt: skip


def _clicks(count: int) -> Callable[[Screen, dict[str, Any]], dict[str, Any]]:
    def click(screen: Screen, args: dict[str, Any]) -> dict[str, Any]:
        x, y = _point(args, screen.size())
        button = _button(args)
        guard = check_guard(screen, args, (x, y))
        screen.click(x, y, button, count)
        return {"x": x, "y": y, "button": button, "guard": guard}

    return click


def _move(screen: Screen, args: dict[str, Any]) -> dict[str, Any]:
    x, y = _point(args, screen.size())
    screen.move(x, y)
    return {"x": x, "y": y}


def _drag(screen: Screen, args: dict[str, Any]) -> dict[str, Any]:
    size = screen.size()
    start, end = _point(args, size), _point(args, size, ("to_x", "to_y"))
    button = _button(args)
    guard = check_guard(screen, args, start)  # the start point is what the agent chose
    screen.drag(start, end, button)
    return {"x": start[0], "y": start[1], "to_x": end[0], "to_y": end[1], "button": button,
            "guard": guard}  # fmt: skip


def _scroll(screen: Screen, args: dict[str, Any]) -> dict[str, Any]:
    direction = args.get("direction", "down")
    amount = args.get("amount", 3)
    if direction not in SCROLL_BUTTONS:
        raise InvalidArgs("direction", "must be up, down, left or right")
    if not isinstance(amount, int) or isinstance(amount, bool) or not 1 <= amount <= 50:
        raise InvalidArgs("amount", "must be between 1 and 50")
    screen.scroll(direction, amount)
    return {"direction": direction, "amount": amount}


def _type(screen: Screen, args: dict[str, Any]) -> dict[str, Any]:
    text = args.get("text")
    if not isinstance(text, str) or len(text) > MAX_TEXT:
        raise InvalidArgs("text", f"must be a string of at most {MAX_TEXT} characters")
    screen.type_text(text)
    return {"typed": len(text)}  # never echo the text: it may be a password


def _key(screen: Screen, args: dict[str, Any]) -> dict[str, Any]:
    keys = args.get("keys", args.get("key"))
    if not isinstance(keys, str) or not keys.strip():
        raise InvalidArgs("keys", "must be a key chord like 'ctrl+shift+t'")
    screen.key(keys.strip())
    return {"keys": keys}


def _mouse_position(screen: Screen, args: dict[str, Any]) -> dict[str, Any]:
    x, y = screen.mouse_position()
    return {"x": x, "y": y}


def _screen_size(screen: Screen, args: dict[str, Any]) -> dict[str, Any]:
    width, height = screen.size()
    return {"width": width, "height": height}


def _keyboard_state(screen: Screen, args: dict[str, Any]) -> dict[str, Any]:
    return screen.keyboard_state()


HANDLERS: dict[str, Callable[[Screen, dict[str, Any]], dict[str, Any]]] = {
    "screenshot": _screenshot,
    "click": _clicks(1),
    "double_click": _clicks(2),
    "move": _move,
    "drag": _drag,
    "scroll": _scroll,
    "type": _type,
    "key": _key,
    "mouse_position": _mouse_position,
    "screen_size": _screen_size,
    "keyboard_state": _keyboard_state,
}
assert set(HANDLERS) == set(ACTIONS)


class HostScreen:
    """Runs screen actions on the helper's display, one at a time, off the event loop."""

    def __init__(self, display: str, backend: str = "xtest") -> None:
        if backend not in BACKENDS:
            raise InvalidArgs("input_backend", f"must be one of {', '.join(BACKENDS)}")
        self.display = display
        self.backend = backend
        self._screen: Screen | None = None
        self._lock = asyncio.Lock()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="host-screen")

    async def run(self, action: str, args: dict[str, Any]) -> dict[str, Any]:
        handler = HANDLERS.get(action)
        if handler is None:
            raise OpError(ErrorCode.NOT_FOUND, f"unknown screen action {action[:40]!r}")
        async with self._lock:
            loop = asyncio.get_running_loop()
            result = await loop.run_in_executor(self._executor, self._call, handler, args)
        return {**result, "display": self.display}

    def _call(
        self, handler: Callable[[Screen, dict[str, Any]], dict[str, Any]], args: dict[str, Any]
    ) -> dict[str, Any]:
        if not self.display and self.backend == "xtest":
            raise OpError(ErrorCode.UNAVAILABLE, "the host helper has no display to drive")
        if self._screen is None:
            self._screen = open_screen(self.backend, self.display)
        try:
            return handler(self._screen, args)
        except (xerror.ConnectionClosedError, xerror.XError, mss.ScreenShotError, OSError) as err:
            self._close()  # the display went away: reopen on the next action
            raise OpError(ErrorCode.UNAVAILABLE, f"display {self.display} failed: {err}") from err

    def _close(self) -> None:
        if self._screen is not None:
            screen, self._screen = self._screen, None
            try:
                screen.close()
            except (xerror.ConnectionClosedError, OSError):
                log.debug("host display connection already closed")

    async def aclose(self) -> None:
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._close)
        self._executor.shutdown(wait=True)
