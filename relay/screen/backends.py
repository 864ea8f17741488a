"""Input backends behind one small interface, chosen by name in one place.

``"xtest"`` (default) is the X11 path used for every relay desktop: a relay only drives the
X displays it starts. A screen that is not an X display is the host helper's, whose
``pyautogui`` backend drives it (``host_helper/pyautogui_screen.py``).
"""

from __future__ import annotations

import importlib
from typing import Protocol

from wire.errors import InvalidArgs

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


# name → "module:attribute", resolved when chosen.
BACKENDS: dict[str, str] = {
    "xtest": "relay.screen.xinput:XTestInput",
}


def backend_factory(name: str) -> BackendFactory:
    """Resolve a backend name from configuration to its class."""
    target = BACKENDS.get(name)
    if target is None:
        raise InvalidArgs("input_backend", f"unknown backend {name!r}; known: {sorted(BACKENDS)}")
    module_name, _, attribute = target.partition(":")
    factory: BackendFactory = getattr(importlib.import_module(module_name), attribute)
    return factory
