"""The pages of a one-time login link: the confirmation a ``GET`` shows, and the refusals.

Opening a link only shows a page with one button; pressing it ``POST``s the link, which signs
the browser in. So a link previewer, a mail scanner or another site that sends the browser to
the link spends nothing and signs nobody in, and a cross-site form ``POST`` is refused by its
``Origin`` and ``Sec-Fetch-Site`` (``server.auth.routes``). Plain HTML, no script, no style:
it works without JavaScript; its Content-Security-Policy allows no inline script, no plugin,
no framing, and forms only to the server itself.
"""

from __future__ import annotations

import html
from typing import Final

from starlette.responses import HTMLResponse

# No caching, no framing (the button cannot be clicked through another site's page), no
# script. ``same-origin``: the form's POST carries its Origin (``no-referrer`` would make it
# ``null``), and nothing of the link's URL leaves for another origin.
PAGE_HEADERS: Final = {
    "Cache-Control": "no-store",
    "Referrer-Policy": "same-origin",
    "Content-Security-Policy": (
        "default-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; "
        "form-action 'self'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
}
# Sec-Fetch-Site values of a navigation another site started.
FOREIGN_SITES: Final = frozenset({"cross-site", "same-site"})
_HEAD: Final = (
    "<!doctype html><html lang=en><meta charset=utf-8>"
    '<meta name=viewport content="width=device-width"><meta name=robots content=noindex>'
    "<title>Sign in to relaydesk</title>"
)
_FOREIGN_WARNING: Final = (
    "<p><strong>Another site sent you here.</strong> Sign in only if you asked for this link "
    "yourself: signing in replaces the account this browser is signed in with.</p>"
)


def confirmation_page(path: str, *, sent_by_another_site: bool) -> HTMLResponse:
    """The page a link's ``GET`` shows: what the link does, and the button that does it."""
    body = (
        f"{_HEAD}<h1>Sign in to relaydesk</h1>"
        f"{_FOREIGN_WARNING if sent_by_another_site else ''}"
        "<p>This one-time link signs this browser in to relaydesk. If you did not ask for it, "
        "close this page.</p>"
        f'<form method=post action="{html.escape(path, quote=True)}">'
        "<button type=submit autofocus>Sign in</button></form>"
    )
    return HTMLResponse(body, headers=PAGE_HEADERS)


def refusal_page(message: str, status_code: int) -> HTMLResponse:
    """A link that cannot sign in: used, expired, unknown, or sent from another site."""
    body = f"{_HEAD}<p>{html.escape(message)}</p>"
    return HTMLResponse(body, status_code=status_code, headers=PAGE_HEADERS)
