"""The desktop's browser: the ``desktop.browser`` op, its calls and the argument rules both
ends check (the server's actions before a request leaves, the relay before it acts).

One op carries every browser tool (docs/browser.md): ``call`` names the tool, ``params`` its
arguments. URLs are checked here once: ``http``, ``https`` and ``about:`` only, and ``file:``
where the relay allows it (``RELAYDESK_BROWSER_ALLOW_FILE=1``; the relay then keeps it to the
desktop's home).
"""

from __future__ import annotations

import re
from typing import Any, Final, Literal, TypedDict, get_args
from urllib.parse import unquote, urlsplit

from wire.errors import InvalidArgs
from wire.ops import DesktopTargetArgs, OpSpec

BrowserCall = Literal[
    "tabs",
    "open",
    "close_tab",
    "history",
    "snapshot",
    "act",
    "wait",
    "screenshot",
    "find",
    "evaluate",
    "downloads",
]
BROWSER_CALLS: Final[tuple[BrowserCall, ...]] = get_args(BrowserCall)
URL_SCHEMES: Final = ("http", "https", "about")
URL_MAX: Final = 8192
# A tab is the browser's target id (32 hex digits in Chromium).
TAB_PATTERN: Final = "^[A-Za-z0-9]{1,64}$"
# ``@b<snapshot>:e<element>``: a browser snapshot's element (desktop refs have no ``b``).
REF_PATTERN: Final = "^@b[a-z0-9]{7}:e[0-9]{1,6}$"
REF_RE: Final = re.compile(REF_PATTERN)
# ``browser_screenshot``'s revision: the relay's name for a kept screenshot.
REVISION_PATTERN: Final = "^bs[0-9a-f]{16}$"
History = Literal["back", "forward", "reload"]
HISTORY: Final[tuple[History, ...]] = get_args(History)
Act = Literal["click", "fill", "press", "select", "hover", "scroll"]
ACTS: Final[tuple[Act, ...]] = get_args(Act)
WaitFor = Literal["load", "network_idle", "url", "selector"]
WAIT_FOR: Final[tuple[WaitFor, ...]] = get_args(WaitFor)
TIMEOUT_MIN_S: Final = 0.1
TIMEOUT_MAX_S: Final = 60.0
TIMEOUT_DEFAULT_S: Final = 15.0
TEXT_MAX: Final = 10_000
KEYS_MAX: Final = 200
# A <select>'s option is picked by its value or by its label (the text it shows).
SelectBy = Literal["value", "label"]
SELECT_BY: Final[tuple[SelectBy, ...]] = get_args(SelectBy)
OPTION_MAX: Final = 1000
# How far one ``browser_scroll`` may move, in CSS pixels along each axis.
SCROLL_MAX: Final = 100_000
CSS_PREFIX: Final = "css:"
SELECTOR_MAX: Final = 1000
FIND_LIMIT_MAX: Final = 200
EXPRESSION_MAX: Final = 100_000
# The relay's switch for ``browser_evaluate`` (it can do anything the page can).
EVALUATE_ENV: Final = "RELAYDESK_BROWSER_EVALUATE"
# The relay's switch for ``file:`` URLs of the desktop's home in ``browser_open``.
FILE_ENV: Final = "RELAYDESK_BROWSER_ALLOW_FILE"
FILE_REFUSED: Final = (
    f"scheme 'file' is refused on this relay: http, https and about: only "
    f"(a relay started with {FILE_ENV}=1 opens files of the desktop's home)"
)


class BrowserArgs(DesktopTargetArgs):
    """``desktop.browser``: one browser call on one desktop's browser."""

    call: BrowserCall
    params: dict[str, Any]


class BrowserResult(TypedDict):
    result: dict[str, Any]


DESKTOP_BROWSER: Final = OpSpec("desktop.browser", BrowserArgs, BrowserResult)


def check_url(url: object, field: str = "url", allow_file: bool = False) -> str:
    """``url`` if the browser may be sent there; ``invalid_args`` naming its scheme if not.
    ``allow_file``: a ``file:`` URL of an absolute path that never goes up (``..``) passes
    (the relay then checks that it names a file of the desktop's home: ``file_path``)."""
    if not isinstance(url, str) or not url:
        raise InvalidArgs(field, "must be a non-empty string")
    if len(url) > URL_MAX:
        raise InvalidArgs(field, f"at most {URL_MAX} characters")
    scheme = urlsplit(url).scheme.lower()
    if scheme == "file":
        if not allow_file:
            raise InvalidArgs(field, FILE_REFUSED)
        file_path(url, field)
        return url
    if scheme not in URL_SCHEMES:
        shown = f"scheme {scheme!r}" if scheme else "a URL without a scheme"
        raise InvalidArgs(field, f"{shown} is refused: http, https and about: only")
    if scheme in ("http", "https") and not urlsplit(url).hostname:
        raise InvalidArgs(field, "names no host")
    return url


def check_select(params: dict[str, Any]) -> tuple[SelectBy, str]:
    """Which option a select act names: exactly one of ``value`` and ``label``."""
    given = [(by, params[by]) for by in SELECT_BY if params.get(by) is not None]
    if len(given) != 1:
        raise InvalidArgs("value", "give exactly one of value and label")
    by, wanted = given[0]
    if not isinstance(wanted, str) or len(wanted) > OPTION_MAX:
        raise InvalidArgs(by, f"must be a string of at most {OPTION_MAX} characters")
    return by, wanted


def check_scroll(params: dict[str, Any]) -> tuple[float, float] | None:
    """A scroll act's ``dx``/``dy`` (CSS pixels), or None to scroll its ``ref`` into view."""
    if params.get("dx") is None and params.get("dy") is None:
        if params.get("ref") is None:
            raise InvalidArgs("ref", "required unless dx or dy is given")
        return None
    moved: list[float] = []
    for field in ("dx", "dy"):
        value = params.get(field, 0)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InvalidArgs(field, "must be a number")
        if not -SCROLL_MAX <= value <= SCROLL_MAX:
            raise InvalidArgs(field, f"must be from {-SCROLL_MAX} to {SCROLL_MAX}")
        moved.append(float(value))
    return moved[0], moved[1]


def file_path(url: str, field: str = "url") -> str:
    """The path a ``file:`` URL names (on this host, never going up): absolute, or from the
    desktop's home when it starts with ``~/`` (``file:~/notes/page.html``)."""
    parts = urlsplit(url)
    if parts.netloc not in ("", "localhost"):
        raise InvalidArgs(field, "a file: URL names a file of the desktop's host, not another")
    path = unquote(parts.path)
    if not path.startswith(("/", "~/")) or "\x00" in path:
        raise InvalidArgs(
            field, "a file: URL needs an absolute path or one from the home (file:~/page.html)"
        )
    if ".." in path.split("/"):
        raise InvalidArgs(field, "a file: URL must not go up a folder ('..')")
    return path


def check_timeout(value: object, field: str = "timeout_s") -> float:
    """A wait's limit in seconds, within the allowed range."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgs(field, "must be a number")
    if not TIMEOUT_MIN_S <= value <= TIMEOUT_MAX_S:
        raise InvalidArgs(field, f"must be from {TIMEOUT_MIN_S} to {TIMEOUT_MAX_S}")
    return float(value)
