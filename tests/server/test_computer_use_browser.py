"""How the browser's page URL is put together from its address bar and its document."""

from __future__ import annotations

import pytest

from server.computer_use.browser import chosen, shortened

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://www.example.com/", "example.com"),
        ("http://127.0.0.1:8000/a.html?q=1", "127.0.0.1:8000/a.html?q=1"),
        ("https://example.com/?q=1", "example.com/?q=1"),
        ("file:///tmp/a.html", "file:///tmp/a.html"),
    ],
)
def test_the_address_bar_shortens_http_urls(url, shown):
    assert shortened(url) == shown


@pytest.mark.parametrize(
    ("bar", "editing", "page", "url"),
    [
        # the bar shows the document's URL: the document's, whole
        (
            "127.0.0.1:8000/a.html",
            False,
            "http://127.0.0.1:8000/a.html",
            "http://127.0.0.1:8000/a.html",
        ),
        ("example.com", False, "https://www.example.com/", "https://www.example.com/"),
        # the document is left at an earlier page: the bar, with the document's scheme
        (
            "127.0.0.1:8000/b.html",
            False,
            "http://127.0.0.1:8000/a.html",
            "http://127.0.0.1:8000/b.html",
        ),
        # another host: https
        ("example.org/x", False, "http://127.0.0.1:8000/a.html", "https://example.org/x"),
        ("/tmp/page.html", False, None, "file:///tmp/page.html"),
        ("about:blank", False, None, "about:blank"),
        # someone types in the bar: only the document says
        ("half typed", True, "http://127.0.0.1:8000/a.html", "http://127.0.0.1:8000/a.html"),
        (None, False, None, None),
        ("", False, "https://example.com/", "https://example.com/"),
    ],
)
def test_the_url_is_the_documents_where_the_bar_agrees_else_the_bars(bar, editing, page, url):
    assert chosen(bar, editing, page) == url
