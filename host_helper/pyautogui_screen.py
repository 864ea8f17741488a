"""The ``pyautogui`` input backend: for a host whose screen is not an X display.

pyautogui drives the one screen of the process it runs in (on Linux it opens ``$DISPLAY`` when
imported), so a helper with this backend serves exactly one screen: the constructor points
``DISPLAY`` at the configured display before the import. Capture is mss, as with XTEST.

What differs from the XTEST backend, by pyautogui's design:
- text: only characters pyautogui has a key for (on X11, those of the keyboard layout) can be
  typed; any other character is refused with ``invalid_args`` naming it, before any key is
  pressed (XTEST remaps spare keycodes and types any Unicode character);
- keyboard state is not observable: the locks are reported as off, with ``source:
  "not_observable"``;
- pyautogui connects to the screen once, when imported: if that display restarts, restart
  the helper (XTEST reconnects on the next action).
"""

from __future__ import annotations

import importlib
import logging
import os
import sys
import time
from typing import Any

from host_helper.screen import (
    ALIASES,
    DOUBLE_CLICK_GAP_S,
    DRAG_DURATION_S,
    DRAG_STEPS,
    MssCapture,
)
from wire.errors import ErrorCode, InvalidArgs, OpError
from wire.guard import CropRect, RGBArray

log = logging.getLogger(__name__)

BUTTON_NAMES = {1: "left", 2: "middle", 3: "right"}
# Our key names (X keysym names and the aliases of host_helper.screen) → pyautogui's.
KEY_NAMES = {
    "control_l": "ctrl", "control_r": "ctrlright", "shift_l": "shift", "shift_r": "shiftright",
    "alt_l": "alt", "alt_r": "altright", "super_l": "win", "super_r": "winright",
    "meta_l": "alt", "return": "enter", "escape": "esc", "prior": "pageup", "next": "pagedown",
}  # fmt: skip


class PyAutoGuiScreen:
    """pyautogui input and mss capture on the process's one screen (used from one thread)."""

    def __init__(self, display_name: str) -> None:
        if display_name and sys.platform.startswith("linux"):
            os.environ["DISPLAY"] = display_name  # pyautogui's X11 backend reads it on import
        try:
            gui: Any = importlib.import_module("pyautogui")
        except ImportError as err:
            raise OpError(ErrorCode.UNAVAILABLE, "the pyautogui backend is not installed") from err
        except Exception as err:
            # Its X11 backend connects on import (KeyError without $DISPLAY, Xlib's errors
            # when the display does not answer): a boundary, so logged whole.
            log.warning("pyautogui could not open %s", display_name or "the screen", exc_info=True)
            problem = f"pyautogui cannot open the screen: {err}"
            raise OpError(ErrorCode.UNAVAILABLE, problem) from err
        gui.FAILSAFE = False  # a corner click is legitimate for an agent
        gui.PAUSE = 0  # pyautogui sleeps 0.1 s after every call by default
        self.gui = gui
        self.capture = MssCapture(display_name if sys.platform.startswith("linux") else None)

    def size(self) -> tuple[int, int]:
        width, height = self.gui.size()
        return int(width), int(height)

    def grab(self, rect: CropRect | None = None) -> RGBArray:
        return self.capture.grab(rect or CropRect(0, 0, *self.size()))

    def move(self, x: int, y: int) -> None:
        self.gui.moveTo(x, y)

    def click(self, x: int, y: int, button: int, count: int) -> None:
        self.gui.click(x, y, clicks=count, interval=DOUBLE_CLICK_GAP_S, button=BUTTON_NAMES[button])

    def drag(self, start: tuple[int, int], end: tuple[int, int], button: int) -> None:
        """Press at ``start``, move in interpolated steps, release at ``end`` (as XTEST does)."""
        self.gui.moveTo(*start)
        self.gui.mouseDown(button=BUTTON_NAMES[button])
        for step in range(1, DRAG_STEPS + 1):
            x = start[0] + (end[0] - start[0]) * step // DRAG_STEPS
            y = start[1] + (end[1] - start[1]) * step // DRAG_STEPS
            self.gui.moveTo(x, y)
            time.sleep(DRAG_DURATION_S / DRAG_STEPS)
        self.gui.mouseUp(button=BUTTON_NAMES[button])

    def scroll(self, direction: str, amount: int) -> None:
        if direction in ("up", "down"):
            self.gui.vscroll(amount if direction == "up" else -amount)
        else:
            self.gui.hscroll(amount if direction == "right" else -amount)

    def type_text(self, text: str) -> None:
        missing = sorted({char for char in text if not self.gui.isValidKey(_char_key(char))})
        if missing:
            shown = ", ".join(repr(char) for char in missing[:10])
            raise InvalidArgs("text", f"the pyautogui backend has no key for {shown}")
        for char in text:
            self.gui.press(_char_key(char))

    def key(self, chord: str) -> None:
        parts = [part.strip() for part in chord.split("+")]
        if not all(parts):
            raise InvalidArgs("keys", f"empty key name in {chord!r}")
        names = [pyautogui_key(part) for part in parts]
        for part, name in zip(parts, names, strict=True):
            if not self.gui.isValidKey(name):
                raise InvalidArgs("keys", f"unknown key {part!r}")
        self.gui.hotkey(*names)

    def mouse_position(self) -> tuple[int, int]:
        x, y = self.gui.position()
        return int(x), int(y)

    def keyboard_state(self) -> dict[str, Any]:
        # pyautogui cannot read the LEDs: unknown, never "off" (the viewer then does not align
        # NumLock on a guess).
        return {"num_lock": None, "caps_lock": None, "scroll_lock": None,
                "source": "not_observable"}  # fmt: skip

    def close(self) -> None:
        self.capture.close()
        log.debug("pyautogui screen closed")


def pyautogui_key(name: str) -> str:
    """One key name of a chord (``ctrl``, ``Return``, ``F4``, ``t``) as pyautogui names it."""
    if len(name) == 1:
        return name
    alias = ALIASES.get(name.casefold(), name).casefold()
    return KEY_NAMES.get(alias, alias.removesuffix("_l"))


def _char_key(char: str) -> str:
    return {"\n": "enter", "\t": "tab"}.get(char, char)
