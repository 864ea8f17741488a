"""The screen tool's action names, defined once for the server, the relay and the host helper.

``IMAGE_ACTIONS`` answer with a picture of the screen (a ``screenshot``, or a ``zoom`` into a
region) that the server keeps under its own ``screen_revision``. ``GUARDED_ACTIONS`` are the
ones whose point an agent chose on such a picture: they run only behind the stale-screen guard
(``wire.guard``). ``mouse_down`` is one of them also without a point: it presses where the
pointer is, and that point is guarded.

``mouse_down``/``mouse_up`` and ``key_down``/``key_up`` press and release separately; what an
agent left held is released when its display's screen connection closes.
"""

from __future__ import annotations

from typing import Final, Literal, get_args

ScreenAction = Literal[
    "screenshot",
    "zoom",
    "click",
    "double_click",
    "move",
    "drag",
    "scroll",
    "type",
    "key",
    "mouse_position",
    "screen_size",
    "keyboard_state",
    "mouse_down",
    "mouse_up",
    "key_down",
    "key_up",
]
SCREEN_ACTIONS: Final[tuple[ScreenAction, ...]] = get_args(ScreenAction)
IMAGE_ACTIONS: Final[frozenset[ScreenAction]] = frozenset({"screenshot", "zoom"})
GUARDED_ACTIONS: Final[frozenset[ScreenAction]] = frozenset(
    {"click", "double_click", "drag", "mouse_down"}
)
