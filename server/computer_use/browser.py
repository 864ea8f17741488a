"""The address of the page the desktop's browser shows: OpenAI's ``current_url``.

When the active window is a Chromium-family browser (its X window class says ``chromium`` or
``chrome``), two things in its accessibility tree say where it is: the address bar ("Address
and search bar", always current, but shown shortened: no ``http://``/``https://``, no
``www.``) and the ``URI`` attribute of the page's document (whole, but Chromium may leave it
at an earlier page after a navigation). The answer is the document's URL when the address bar
shows that URL, else the address bar's text made whole: with the scheme of the document when
it is on the same host, ``file://`` for a path, and ``https://`` otherwise. While a person or
the model is typing in the address bar, only the document says.

Found with the accessibility actions the session's caller may call (``desktop_windows``,
``desktop_find``, ``desktop_read``); anything else — another window active, no accessibility,
nothing found — answers nothing, never an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import urlsplit

from server.computer_use.session import DoorCall
from wire.errors import OpError

BROWSER_CLASSES: Final = ("chromium", "chrome")
ADDRESS_BAR: Final = 'entry[name="Address and search bar"]'
# The showing page of the window (a background tab's document is not showing).
PAGE: Final = "document_web:visible"
MAX_URL: Final = 8192
SHOWN_WHOLE: Final = ("about:", "chrome:", "data:", "file:", "view-source:", "blob:")


def _active(listed: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for window in listed.get("windows", []):
        if window.get("id") == listed.get("active"):
            found: Mapping[str, Any] = window
            return found
    return None


def is_browser(window: Mapping[str, Any]) -> bool:
    app = str(window.get("app") or "")
    return any(name in app for name in BROWSER_CLASSES)


def shortened(url: str) -> str:
    """``url`` as Chromium's address bar shows it: no http(s) scheme, no ``www.``, no ``/``
    alone after the host."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        return url
    rest = url.split("://", 1)[1]
    rest = rest.removeprefix("www.")
    return rest[:-1] if parts.path == "/" and not parts.query and rest.endswith("/") else rest


def _host(text: str) -> str:
    return urlsplit(f"//{text}").netloc.removeprefix("www.")


def chosen(bar: str | None, editing: bool, page: str | None) -> str | None:
    """The page's URL from the address bar's text and the document's URL (either may be
    missing); ``editing``: someone is typing in the address bar."""
    if not bar or editing:
        return page
    if page and (bar == page or bar == shortened(page)):
        return page
    if "://" in bar or bar.startswith(SHOWN_WHOLE):
        return bar
    if bar.startswith("/"):
        return f"file://{bar}"
    same_host = page is not None and urlsplit(page).netloc.removeprefix("www.") == _host(bar)
    scheme = urlsplit(page).scheme if page is not None and same_host else "https"
    return f"{scheme}://{bar}"


async def _read_first(call: DoorCall, selector: str, window: str) -> Mapping[str, Any] | None:
    # Through AT-SPI alone: the document's URI attribute is AT-SPI's (docs/browser.md, "Routing").
    found = await call.action(
        "desktop_find", selector=selector, window=window, limit=1, backend="atspi"
    )
    matches = found.get("matches") or []
    if not matches:
        return None
    read: Mapping[str, Any] = await call.action("desktop_read", ref=matches[0]["ref"])
    return read


async def current_url(call: DoorCall) -> str | None:
    """The URL of the page in the active window when that window is the browser, else None."""
    try:
        active = _active(await call.action("desktop_windows"))
        if active is None or not is_browser(active) or not active.get("name"):
            return None
        window = str(active["name"])
        bar = await _read_first(call, ADDRESS_BAR, window)
        document = await _read_first(call, PAGE, window)
    except OpError:
        return None
    text = bar.get("text") if bar is not None else None
    editing = bar is not None and "focused" in (bar.get("states") or [])
    attributes = document.get("document") if document is not None else None
    page = attributes.get("url") if isinstance(attributes, Mapping) else None
    url = chosen(
        text if isinstance(text, str) else None, editing, page if isinstance(page, str) else None
    )
    return url if url is not None and 0 < len(url) <= MAX_URL else None
