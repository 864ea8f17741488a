"""``relaydesk up``: the all-in-one system as a person starts it."""

from __future__ import annotations

import http.cookiejar
import http.server
import re
import signal
import threading
import urllib.request
from pathlib import Path

import pytest

from tests.support.processes import ProcessFactory, free_port, scaled
from tests.support.stack import FAST_ENV, get_json, relaydesk_argv, wait_until

pytestmark = pytest.mark.integration

LINK = re.compile(r"one-time login link: (http://\S+/login/(rdl_\S+))")


def _start_up(factory: ProcessFactory, data_dir: Path, port: int, name: str):
    env = {**FAST_ENV, "RELAYDESK_DATA_DIR": str(data_dir)}
    process = factory(relaydesk_argv("up", "--port", str(port)), name=name, env=env)
    match = process.wait_for_line(LINK, scaled(60))
    return process, match.group(1)


def _relays(port: int) -> int:
    try:
        status, body = get_json(f"http://127.0.0.1:{port}/readyz", timeout=1.0)
    except OSError:
        return -1
    return int(body["relays_connected"]) if status == 200 else -1


async def test_up_serves_logs_in_by_link_and_stops_cleanly_on_ctrl_c(
    tmp_path: Path, process_factory: ProcessFactory
) -> None:
    port = free_port()
    up, link = _start_up(process_factory, tmp_path / "data", port, "up")
    await wait_until(lambda: _relays(port) == 1, 30, "the all-in-one relay to connect")

    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    with opener.open(link, timeout=scaled(10)) as response:
        assert response.status == 200 and b"Sign in" in response.read()  # the button's page
    assert not any(cookie.name == "relaydesk_session" for cookie in jar)
    with opener.open(link, data=b"", timeout=scaled(10)) as response:  # pressing the button
        assert response.status == 200  # redirected to the app
    assert any(cookie.name == "relaydesk_session" for cookie in jar)
    with opener.open(f"http://127.0.0.1:{port}/api/v1/me", timeout=scaled(10)) as response:
        assert b'"username": "admin"' in response.read().replace(b'":"', b'": "')
    with pytest.raises(urllib.error.HTTPError) as reused:
        opener.open(link, data=b"", timeout=scaled(10))
    assert reused.value.code == 400, "a login link works once"

    up.send_signal(signal.SIGINT)
    assert up.wait(scaled(30)) == 0
    await wait_until(lambda: _relays(port) == -1, 10, "the server to stop")
    assert "stopping relay" in up.log_text()
    assert link.rsplit("/", 1)[1] not in up.log_text().replace(link, "")


async def test_up_again_on_the_same_data_dir_reuses_what_it_created(
    tmp_path: Path, process_factory: ProcessFactory
) -> None:
    data_dir = tmp_path / "data"
    port = free_port()
    first, first_link = _start_up(process_factory, data_dir, port, "first")
    await wait_until(lambda: _relays(port) == 1, 30, "the first relay")
    first.send_signal(signal.SIGTERM)
    assert first.wait(scaled(30)) == 0

    _second, second_link = _start_up(process_factory, data_dir, port, "second")
    await wait_until(lambda: _relays(port) == 1, 30, "the relay after a restart")
    assert second_link != first_link, "every start mints a fresh login link"
    users = relaydesk_argv("admin", "list", "relays", "--json")
    listing = process_factory(users, name="list", env={"RELAYDESK_DATA_DIR": str(data_dir)})
    assert listing.wait(scaled(30)) == 0
    assert listing.log_text().count('"relay_id"') == 1, "one relay, created once"
    # The relay runs beside the server: it registers the direct viewing path.
    assert '"direct_vnc"' in listing.log_text()


async def test_up_on_a_port_another_server_holds_fails_at_once_naming_it(
    tmp_path: Path, process_factory: ProcessFactory
) -> None:
    port = free_port()
    other = http.server.ThreadingHTTPServer(("127.0.0.1", port), _AlwaysReady)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    try:
        env = {**FAST_ENV, "RELAYDESK_DATA_DIR": str(tmp_path / "data")}
        argv = relaydesk_argv("up", "--host", "127.0.0.1", "--port", str(port))
        up = process_factory(argv, name="up", env=env)
        assert up.wait(scaled(30)) == 1
        assert f"cannot serve on 127.0.0.1:{port}" in up.log_text()
        assert "relaydesk is up" not in up.log_text()
        assert "login link" not in up.log_text()
    finally:
        other.shutdown()
        other.server_close()


class _AlwaysReady(http.server.BaseHTTPRequestHandler):
    """Another server: it answers every request, /readyz included, with 200."""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, format: str, *args: object) -> None:
        return
