"""A real desktop whose Chromium was started by the relay (with its private DevTools pipe),
and a small HTTP server of the tests' own serving the pages it visits."""

from __future__ import annotations

import asyncio
import contextlib
import http.server
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

from tests.support.a11y_stack import A11yStack, a11y_stack
from tests.support.processes import free_port, scaled

TABLE_ROWS = "".join(f"<tr><td>Item {n}</td><td>{n * 3} EUR</td></tr>" for n in range(1, 61))
PAGES: dict[str, str] = {
    "/form.html": """<!doctype html><html><head><title>Order form</title></head><body>
<h1>Order form</h1>
<form onsubmit="event.preventDefault();
  document.getElementById('result').textContent = 'Ordered: ' +
  document.getElementById('customer').value;">
<label for="customer">Customer</label> <input id="customer" name="customer">
<label><input type="checkbox" id="gift"> Gift wrap</label>
<label for="size">Size</label> <select id="size" onchange="
  document.getElementById('picked').textContent = 'Size: ' + this.value;">
<option value="s">Small</option><option value="m">Medium</option>
<option value="l">Large</option></select>
<button type="submit">Place order</button>
</form>
<p id="result" role="status"></p>
<p id="picked" role="status"></p>
<button type="button" onmouseover="document.getElementById('tip').textContent = 'Tip shown'"
>Hover for a tip</button> <span id="tip"></span>
<a href="/second.html">Next page</a>
<a href="/second.html" target="_blank">Open in new tab</a>
<a href="/prices.csv">Download the prices</a>
<table aria-label="Items"><tr><th>Item</th><th>Price</th></tr>"""
    + TABLE_ROWS
    + "</table></body></html>",
    "/second.html": """<!doctype html><html><head><title>Second page</title></head><body>
<h1>Second page</h1><button onclick="this.textContent='Pressed'">Press me</button>
<p><a href="/form.html">Back to the form</a></p></body></html>""",
    "/late.html": """<!doctype html><html><head><title>Late</title></head><body>
<h1>Late page</h1><div id="slot"></div>
<script>setTimeout(() => { const b = document.createElement('button');
b.textContent = 'Arrived'; b.id = 'arrived';
document.getElementById('slot').appendChild(b); }, 800);</script></body></html>""",
}


# Served as a download (``Content-Disposition: attachment``).
DOWNLOADS: dict[str, bytes] = {
    "/prices.csv": b"item,price\n" + b"".join(b"Item %d,%d\n" % (n, n * 3) for n in range(1, 61))
}


class _Pages(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        if path in DOWNLOADS:
            self._send(DOWNLOADS[path], "text/csv", path.rsplit("/", 1)[1])
            return
        body = PAGES.get(path)
        if body is None:
            self.send_error(404)
            return
        self._send(body.encode(), "text/html; charset=utf-8")

    def _send(self, data: bytes, content_type: str, attachment: str | None = None) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        if attachment is not None:
            self.send_header("Content-Disposition", f'attachment; filename="{attachment}"')
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        return


@contextlib.contextmanager
def page_server() -> Iterator[str]:
    """The tests' pages on a loopback port; yields the base URL."""
    port = free_port()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), _Pages)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


BROWSER_PROFILE = "browser-profile"


def browser_command(shared: Path, url: str, *flags: str) -> str:
    """Chromium as a desktop's start-up app, its profile under ``shared``."""
    return " ".join(
        [
            "chromium",
            f"--user-data-dir={shared / BROWSER_PROFILE}",
            "--no-first-run",
            "--no-default-browser-check",
            "--password-store=basic",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            *flags,
            url,
        ]
    )


@contextlib.asynccontextmanager
async def browser_stack(
    root: Path, base_url: str, *flags: str, env: dict[str, str] | None = None
) -> AsyncIterator[A11yStack]:
    """A server, a relay (with ``env``) and a desktop whose start-up app is Chromium on the
    form page."""
    app = browser_command(Path("{shared}"), f"{base_url}/form.html", *flags)
    async with a11y_stack(root, [app], env=env) as stack:
        yield stack


async def form_tab_shown(stack: A11yStack) -> None:
    """Wait (a probe, at most a minute, scaled) until the browser lists the form's tab."""
    deadline = time.monotonic() + scaled(60)
    while True:
        status, body = await stack.act("browser_tabs")
        if status == 200 and any(t["title"] == "Order form" for t in body["tabs"]):
            return
        assert time.monotonic() < deadline, body
        await asyncio.sleep(0.5)
