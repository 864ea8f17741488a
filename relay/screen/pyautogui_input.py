"""The ``pyautogui`` input backend: for a screen that is not an X display.

pyautogui cannot be handed a display: on Linux its X11 module (and mouseinfo's) opens
``os.environ["DISPLAY"]`` when imported and keeps that one connection for the process. So it
runs in a child process (``relay/screen/pyautogui_child.py``) whose own environment names the
display; this process's environment is never changed, and the token-like ``RELAYDESK_*``
variables are not passed on. The child lives as long as this backend: the screen service's
worker for the display opens it, reopens it after a failure, and closes it with the display.

Key names and chords go through the same table as XTEST (``relay.screen.keys``) and are
translated to pyautogui's names here. What differs from XTEST, by pyautogui's design:
- text: only characters pyautogui has a key for (on X11, those of the keyboard layout) can be
  typed; any other character is refused with ``invalid_args`` naming it, before any key is
  pressed (XTEST binds spare keycodes and types any Unicode character);
- keys pyautogui has no name for (e.g. ``XF86AudioMute`` outside its media keys) are refused
  the same way;
- keyboard state is not observable: ``None`` for every lock, ``source: "not_observable"``.

Keys and buttons pressed by ``key_down``/``mouse_down`` are remembered and released by
``release_held`` and ``close``, before the child ends.
"""

from __future__ import annotations

import json
import logging
import os
import select
import subprocess
import sys
import time
from typing import IO, Any

from relay.screen.backends import (
    DOUBLE_CLICK_GAP_S,
    DRAG_DURATION_S,
    DRAG_STEPS,
    KeyboardState,
    drag_path,
)
from relay.screen.keys import (
    UNICODE_KEYSYM_OFFSET,
    char_to_keysym,
    keysym_name,
    parse_chord,
    parse_key,
)
from wire.errors import ErrorCode, InvalidArgs, OpError

logger = logging.getLogger(__name__)

CHILD_MODULE = "relay.screen.pyautogui_child"
START_TIMEOUT_S = 20.0
CALL_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 2.0
BUTTON_NAMES = {1: "left", 2: "middle", 3: "right"}
MAX_CODE_POINT = 0x10FFFF
# X keysym names → pyautogui's (the same on every platform pyautogui supports).
PYAUTOGUI_NAMES = {
    "Control_L": "ctrl",
    "Control_R": "ctrlright",
    "Shift_L": "shift",
    "Shift_R": "shiftright",
    "Alt_L": "alt",
    "Alt_R": "altright",
    "Meta_L": "alt",
    "Meta_R": "altright",
    "Super_L": "win",
    "Super_R": "winright",
    "Return": "enter",
    "Escape": "esc",
    "Prior": "pageup",
    "Page_Up": "pageup",
    "Next": "pagedown",
    "Page_Down": "pagedown",
    "BackSpace": "backspace",
    "Caps_Lock": "capslock",
    "Num_Lock": "numlock",
    "Scroll_Lock": "scrolllock",
    "Print": "printscreen",
    "Menu": "apps",
    "XF86AudioMute": "volumemute",
    "XF86AudioLowerVolume": "volumedown",
    "XF86AudioRaiseVolume": "volumeup",
    "XF86AudioPlay": "playpause",
    "XF86AudioNext": "nexttrack",
    "XF86AudioPrev": "prevtrack",
}
_CHAR_NAMES = {"\n": "enter", "\r": "enter", "\t": "tab", "\b": "backspace"}


def pyautogui_name(keysym: int) -> str:
    """pyautogui's name for the key of ``keysym`` (a character, or a lower-case key name)."""
    if 0x20 <= keysym <= 0x7E or 0xA0 <= keysym <= 0xFF:
        return chr(keysym)
    if UNICODE_KEYSYM_OFFSET <= keysym <= UNICODE_KEYSYM_OFFSET + MAX_CODE_POINT:
        return chr(keysym - UNICODE_KEYSYM_OFFSET)
    name = keysym_name(keysym) or hex(keysym)
    if name.startswith("KP_") and name[3:].isdigit():
        return f"num{name[3:]}"
    return PYAUTOGUI_NAMES.get(name, name.casefold())


def _child_env(display_name: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RELAYDESK_")}
    if display_name and sys.platform.startswith("linux"):
        env["DISPLAY"] = display_name
    return env


class PyAutoGuiInput:
    """pyautogui input on one screen, through its child process (used from one thread)."""

    def __init__(self, display_name: str) -> None:
        self._display = display_name or "the screen"
        # Pressed by mouse_down/key_down and not released yet (in the order pressed).
        self._buttons: dict[int, None] = {}
        self._keys: dict[str, None] = {}
        self._child = subprocess.Popen(
            [sys.executable, "-m", CHILD_MODULE],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=_child_env(display_name),
            close_fds=True,
            text=True,
        )
        try:
            self._read(START_TIMEOUT_S)
        except BaseException:
            self.close()
            raise

    # -- the child -------------------------------------------------------------------------

    def _read(self, timeout_s: float) -> Any:
        stdout: IO[str] | None = self._child.stdout
        assert stdout is not None
        ready, _, _ = select.select([stdout], [], [], timeout_s)
        line = stdout.readline() if ready else ""
        if not line:
            raise ConnectionError(f"pyautogui's process for {self._display} does not answer")
        answer = json.loads(line)
        if "error" in answer:
            raise OpError(ErrorCode.UNAVAILABLE, str(answer["error"]))
        return answer["ok"]

    def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        stdin = self._child.stdin
        assert stdin is not None
        stdin.write(json.dumps({"call": name, "args": args, "kwargs": kwargs}) + "\n")
        stdin.flush()
        return self._read(CALL_TIMEOUT_S)

    def close(self) -> None:
        if self._keys or self._buttons:
            try:
                self.release_held()
            except (OpError, ConnectionError, OSError, ValueError):
                logger.debug("pyautogui's process ended before held keys were released")
        if self._child.stdin is not None:
            self._child.stdin.close()  # the child exits when its input ends
        try:
            self._child.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._child.kill()
            self._child.wait(STOP_TIMEOUT_S)
        if self._child.stdout is not None:
            self._child.stdout.close()
        logger.debug("pyautogui process for %s closed", self._display)

    # -- the input backend -------------------------------------------------------------------

    def screen_size(self) -> tuple[int, int]:
        width, height = self._call("size")
        return int(width), int(height)

    def mouse_position(self) -> tuple[int, int]:
        x, y = self._call("position")
        return int(x), int(y)

    def keyboard_state(self) -> KeyboardState:
        # pyautogui cannot read the LEDs: unknown, never "off" (the viewer then does not
        # align NumLock on a guess).
        return {
            "num_lock": None,
            "caps_lock": None,
            "scroll_lock": None,
            "source": "not_observable",
        }

    def move(self, x: int, y: int) -> None:
        self._call("moveTo", x, y)

    def click(self, x: int, y: int, button: int = 1, count: int = 1) -> None:
        self._call(
            "click", x, y, clicks=count, interval=DOUBLE_CLICK_GAP_S, button=BUTTON_NAMES[button]
        )

    def drag(self, start: tuple[int, int], end: tuple[int, int], button: int = 1) -> None:
        """Press at ``start``, move in interpolated steps, release at ``end`` (as XTEST does)."""
        self._call("moveTo", *start)
        self._call("mouseDown", button=BUTTON_NAMES[button])
        for point in drag_path(start, end):
            self._call("moveTo", *point)
            time.sleep(DRAG_DURATION_S / DRAG_STEPS)
        self._call("mouseUp", button=BUTTON_NAMES[button])

    def scroll(self, direction: str, amount: int) -> None:
        if direction in ("up", "down"):
            self._call("vscroll", amount if direction == "up" else -amount)
        else:
            self._call("hscroll", amount if direction == "right" else -amount)

    def _refuse_unknown(self, names: dict[str, str], field: str, what: str) -> None:
        """``InvalidArgs`` naming every name pyautogui has no key for (before any input)."""
        missing = [shown for name, shown in names.items() if not self._call("isValidKey", name)]
        if missing:
            listed = ", ".join(repr(shown) for shown in sorted(missing)[:10])
            raise InvalidArgs(field, f"the pyautogui backend has no {what} for {listed}")

    def type_text(self, text: str) -> None:
        names = [_CHAR_NAMES.get(char) or pyautogui_name(char_to_keysym(char)) for char in text]
        self._refuse_unknown(dict(zip(names, text, strict=True)), "text", "key")
        if names:
            self._call("press", names)

    def key(self, chord_text: str) -> None:
        chord = parse_chord(chord_text)
        names = [pyautogui_name(keysym) for keysym in (*chord.modifiers, chord.key)]
        self._refuse_unknown({name: name for name in names}, "keys", "key named")
        self._call("hotkey", *names)

    def mouse_down(self, button: int = 1) -> None:
        self._call("mouseDown", button=BUTTON_NAMES[button])
        self._buttons[button] = None

    def mouse_up(self, button: int = 1) -> None:
        self._call("mouseUp", button=BUTTON_NAMES[button])
        self._buttons.pop(button, None)

    def _key_name(self, key_name: str) -> str:
        name = pyautogui_name(parse_key(key_name))
        self._refuse_unknown({name: name}, "keys", "key named")
        return name

    def key_down(self, key_name: str) -> None:
        name = self._key_name(key_name)
        self._call("keyDown", name)
        self._keys[name] = None

    def key_up(self, key_name: str) -> None:
        name = self._key_name(key_name)
        self._call("keyUp", name)
        self._keys.pop(name, None)

    def release_held(self) -> None:
        """Release every key and button ``key_down``/``mouse_down`` left down, last first."""
        while self._keys:
            name = next(reversed(self._keys))
            self._keys.pop(name)
            self._call("keyUp", name)
        while self._buttons:
            button = next(reversed(self._buttons))
            self._buttons.pop(button)
            self._call("mouseUp", button=BUTTON_NAMES[button])
