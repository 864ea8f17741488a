"""The screen op's argument rules, defined once for the server and the relay.

The server's ``screen`` action checks a caller's request against them before anything is sent
(``server.screen.request``: a 4xx naming the field); the relay's screen service checks the op's
arguments against them again before it acts (``relay.screen.args``), whoever sent them (the
server, the host helper's client, the relay's accessibility service). What only one end can
judge stays there: the caller's coordinate systems on the server, the live screen's size on the
relay.

The checks take a value (not a request) so that each end keeps its own word on a missing field:
the server leaves an absent optional field out, the relay falls back on a default.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Literal, get_args

from wire.errors import InvalidArgs

ImageFormat = Literal["png", "jpeg", "webp"]
IMAGE_FORMATS: Final[tuple[ImageFormat, ...]] = get_args(ImageFormat)
ButtonName = Literal["left", "middle", "right"]
BUTTON_NAMES: Final[tuple[ButtonName, ...]] = get_args(ButtonName)
ScrollDirection = Literal["up", "down", "left", "right"]
SCROLL_DIRECTIONS: Final[tuple[ScrollDirection, ...]] = get_args(ScrollDirection)

# The longest text ``type`` types (characters), and the longest key chord ``key`` presses.
MAX_TEXT: Final = 10_000
MAX_KEY: Final = 200
# Wheel clicks of one ``scroll``.
MAX_AMOUNT: Final = 50
DEFAULT_AMOUNT: Final = 3
# An image's quality (JPEG, WebP) and a screenshot's preview width, inclusive ranges.
QUALITY: Final = (1, 100)
PREVIEW_MAX_WIDTH: Final = (16, 100_000)


def whole_number(value: object, name: str, low: int, high: int) -> int:
    """``value`` as an integer from ``low`` to ``high``; else ``InvalidArgs`` naming ``name``."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidArgs(name, "must be an integer")
    if not low <= value <= high:
        raise InvalidArgs(name, f"must be between {low} and {high}")
    return value


def text(value: object, name: str, limit: int) -> str:
    """``value`` as a string of at most ``limit`` characters; else ``InvalidArgs``."""
    if not isinstance(value, str):
        raise InvalidArgs(name, "must be a string")
    if len(value) > limit:
        raise InvalidArgs(name, f"is {len(value)} characters; the limit is {limit}")
    return value


def one_of(value: object, name: str, options: Sequence[str]) -> str:
    """``value`` when it is one of ``options``; else ``InvalidArgs`` listing them."""
    if value not in options:
        raise InvalidArgs(name, f"must be one of {', '.join(options)}")
    return str(value)
