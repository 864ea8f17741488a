"""Input backends behind one small interface, chosen by name in one place.

``"xtest"`` (default) drives an X display through its own XTEST connection: every relay
desktop and the host helper's screen when it is an X display. ``"pyautogui"`` drives a
screen that is not an X display (the host helper's ``--input-backend pyautogui``); it runs
pyautogui in a child process (``relay/screen/pyautogui_input.py`` says why).
"""

from __future__ import annotations

import importlib
from typing import Literal, Protocol, TypedDict

from wire.errors import InvalidArgs

DEFAULT_BACKEND = "xtest"
SCROLL_BUTTONS = {"up": 4, "down": 5, "left": 6, "right": 7}
# Well inside every toolkit's double-click time (GTK and Qt default to 400 ms), and long
# enough that clients see two distinct clicks.
DOUBLE_CLICK_GAP_S = 0.04
DRAG_STEPS = 12
DRAG_DURATION_S = 0.12


class KeyboardState(TypedDict):
    """Lock keys as the display reports them; ``None`` where the backend cannot observe them."""

    num_lock: bool | None
    caps_lock: bool | None
    scroll_lock: bool | None
    source: Literal["led_mask", "not_observable"]


class InputBackend(Protocol):
    """What the screen service needs from an input implementation (one per display).

    Key chords and text are in relaydesk's key names (``relay.screen.keys``) whatever the
    backend: a name that works on one display works on every other. A backend remembers the
    buttons and keys ``mouse_down``/``key_down`` left down and releases them on
    ``release_held`` and on ``close``; releasing what is not down is harmless.
    """

    def screen_size(self) -> tuple[int, int]: ...
    def mouse_position(self) -> tuple[int, int]: ...
    def keyboard_state(self) -> KeyboardState: ...
    def move(self, x: int, y: int) -> None: ...
    def click(self, x: int, y: int, button: int = 1, count: int = 1) -> None: ...
    def drag(self, start: tuple[int, int], end: tuple[int, int], button: int = 1) -> None: ...
    def scroll(self, direction: str, amount: int) -> None: ...
    def key(self, chord_text: str) -> None: ...
    def type_text(self, text: str) -> None: ...
    def mouse_down(self, button: int = 1) -> None: ...
    def mouse_up(self, button: int = 1) -> None: ...
    def key_down(self, key_name: str) -> None: ...
    def key_up(self, key_name: str) -> None: ...
    def release_held(self) -> None: ...
    def close(self) -> None: ...


def drag_path(start: tuple[int, int], end: tuple[int, int]) -> list[tuple[int, int]]:
    """The points a drag moves through after pressing at ``start``, ending at ``end``.

    Toolkits start a drag only after motion past a threshold while pressed; intermediate
    points with pauses of ``DRAG_DURATION_S / DRAG_STEPS`` look like a hand-made drag.
    """
    return [
        (
            start[0] + (end[0] - start[0]) * step // DRAG_STEPS,
            start[1] + (end[1] - start[1]) * step // DRAG_STEPS,
        )
        for step in range(1, DRAG_STEPS + 1)
    ]


class BackendFactory(Protocol):
    def __call__(self, display_name: str) -> InputBackend: ...


# name → "module:attribute", imported when chosen.
BACKENDS: dict[str, str] = {
    "xtest": "relay.screen.xinput:XTestInput",
    "pyautogui": "relay.screen.pyautogui_input:PyAutoGuiInput",
}


def backend_factory(name: str) -> BackendFactory:
    """Resolve a backend name from configuration to its class."""
    target = BACKENDS.get(name)
    if target is None:
        raise InvalidArgs("input_backend", f"unknown backend {name!r}; known: {sorted(BACKENDS)}")
    module_name, _, attribute = target.partition(":")
    factory: BackendFactory = getattr(importlib.import_module(module_name), attribute)
    return factory
