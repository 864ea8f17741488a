"""Input backends behind one small interface, chosen by name in one place.

``"xtest"`` (default) is the X11 path used for every relay desktop. ``"pyautogui"`` is the
thin non-X11 path (e.g. a host helper on a machine whose screen is not an X display); it is
imported lazily and is unverified in relaydesk's test environment.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any, Protocol

from relay.screen.keys import KEY_ALIASES, MODIFIER_ALIASES
from wire.errors import ErrorCode, InvalidArgs, OpError

logger = logging.getLogger(__name__)

DEFAULT_BACKEND = "xtest"


class InputBackend(Protocol):
    """What the screen service needs from an input implementation (one per display)."""

    def screen_size(self) -> tuple[int, int]: ...
    def mouse_position(self) -> tuple[int, int]: ...
    def keyboard_state(self) -> dict[str, bool]: ...
    def move(self, x: int, y: int) -> None: ...
    def press(self, button: int) -> None: ...
    def release(self, button: int) -> None: ...
    def click(self, x: int, y: int, button: int = 1, count: int = 1) -> None: ...
    def drag(self, start: tuple[int, int], end: tuple[int, int], button: int = 1) -> None: ...
    def scroll(self, direction: str, amount: int) -> None: ...
    def key(self, chord_text: str) -> None: ...
    def type_text(self, text: str) -> None: ...
    def close(self) -> None: ...


class BackendFactory(Protocol):
    def __call__(self, display_name: str) -> InputBackend: ...


# name → "module:attribute"; resolved lazily so pyautogui is imported only when chosen.
BACKENDS: dict[str, str] = {
    "xtest": "relay.screen.xinput:XTestInput",
    "pyautogui": "relay.screen.backends:PyAutoGuiInput",
}

_BUTTON_NAMES = {1: "left", 2: "middle", 3: "right"}


def backend_factory(name: str) -> BackendFactory:
    """Resolve a backend name from configuration to its class."""
    target = BACKENDS.get(name)
    if target is None:
        raise InvalidArgs("input_backend", f"unknown backend {name!r}; known: {sorted(BACKENDS)}")
    module_name, _, attribute = target.partition(":")
    factory: BackendFactory = getattr(importlib.import_module(module_name), attribute)
    return factory


class PyAutoGuiInput:
    """Input through pyautogui for screens that are not X displays (unverified here).

    pyautogui drives the one screen of the process it runs in, so ``display_name`` is only
    recorded; use one host helper per screen. Keyboard state is not observable: unknown locks
    are reported as False.
    """

    def __init__(self, display_name: str) -> None:
        try:
            gui: Any = importlib.import_module("pyautogui")
        except ImportError as err:
            raise OpError(ErrorCode.UNAVAILABLE, "the pyautogui backend is not installed") from err
        gui.FAILSAFE = False  # a corner click is legitimate for an agent
        self._gui = gui
        self._display_name = display_name

    def screen_size(self) -> tuple[int, int]:
        width, height = self._gui.size()
        return int(width), int(height)

    def mouse_position(self) -> tuple[int, int]:
        x, y = self._gui.position()
        return int(x), int(y)

    def keyboard_state(self) -> dict[str, bool]:
        return {"num_lock": False, "caps_lock": False, "scroll_lock": False}

    def move(self, x: int, y: int) -> None:
        self._gui.moveTo(x, y)

    def press(self, button: int) -> None:
        self._gui.mouseDown(button=_BUTTON_NAMES[button])

    def release(self, button: int) -> None:
        self._gui.mouseUp(button=_BUTTON_NAMES[button])

    def click(self, x: int, y: int, button: int = 1, count: int = 1) -> None:
        self._gui.click(x, y, clicks=count, interval=0.04, button=_BUTTON_NAMES[button])

    def drag(self, start: tuple[int, int], end: tuple[int, int], button: int = 1) -> None:
        self._gui.moveTo(*start)
        self._gui.dragTo(*end, duration=0.12, button=_BUTTON_NAMES[button])

    def scroll(self, direction: str, amount: int) -> None:
        if direction in ("up", "down"):
            self._gui.scroll(amount if direction == "up" else -amount)
        else:
            self._gui.hscroll(amount if direction == "right" else -amount)

    def key(self, chord_text: str) -> None:
        names = [part.strip().casefold() for part in chord_text.split("+") if part.strip()]
        mapped = [_pyautogui_key(name) for name in names]
        self._gui.hotkey(*mapped)

    def type_text(self, text: str) -> None:
        self._gui.write(text)

    def close(self) -> None:
        logger.debug("pyautogui backend for %s closed", self._display_name)


def _pyautogui_key(name: str) -> str:
    alias = MODIFIER_ALIASES.get(name) or KEY_ALIASES.get(name)
    if alias is None:
        return name
    # pyautogui names keys in lower case without side suffixes: "ctrl", "shift", "win"...
    return alias.split("_")[0].casefold().replace("control", "ctrl").replace("super", "win")
