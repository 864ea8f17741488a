"""examples/http_agent.py run the way a user runs it: a subprocess against a real server, a real
relay and a desktop running the tests' GTK form (tests/support/a11y_app.py).

What the app really did is read from the state file the form writes, not from the example's
output: the guarded pixel click toggles "Remember me", and the text typed by ref into "Name" is
what "Save" stores. A bad token ends it with the server's message. Its one retry after
``stale_screen`` runs against a scripted server: a real screen cannot be made to change on cue
between the example's own screenshot and its click.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from PIL import Image

from tests.support.a11y_stack import FORM, A11yStack, a11y_stack
from tests.support.processes import scaled
from tests.support.stack import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = REPO_ROOT / "examples" / "http_agent.py"
WIDTH, HEIGHT = 1280, 800  # the stack's desktop geometry
TEXT = "typed by ref, über HTTP"
# What the example reads from the environment: only what a test gives it.
OWN_SETTINGS = ("RELAYDESK_SERVER_URL", "RELAYDESK_CONVERSATION_ID", "RELAYDESK_API_TOKEN")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[A11yStack]:
    async with a11y_stack(tmp_path_factory.mktemp("http-agent"), [FORM]) as stack:
        await wait_until(lambda: stack.state() != {}, scaled(30), "the form to start")
        await stack.wait_app("a11y_app.py")
        yield stack


async def _run(*args: str, token: str | None = None) -> subprocess.CompletedProcess[str]:
    """The example's outcome, run off the event loop (the server under test shares it)."""
    env = {k: v for k, v in os.environ.items() if k not in OWN_SETTINGS}
    env |= {"RELAYDESK_API_TOKEN": token} if token else {}
    return await asyncio.to_thread(
        subprocess.run,
        [sys.executable, str(EXAMPLE), *args],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=scaled(120),
        check=False,
        cwd=REPO_ROOT,
    )


def _where(stack: A11yStack) -> list[str]:
    return ["--server", stack.url, "--conversation", stack.seed.conversation_id]


def _steps(stdout: str) -> list[str]:
    """The call each printed step line names (``desktop_find``, ``screen click``, …)."""
    return [line.split("  ")[0].strip() for line in stdout.splitlines() if " ms  " in line]


async def _centre_of(stack: A11yStack, selector: str) -> str:
    found = await stack.ok("desktop_find", selector=selector, window="relaydesk form")
    x, y, width, height = found["matches"][0]["bounds"]
    return f"{x + width // 2},{y + height // 2}"


async def test_it_clicks_on_the_screenshot_then_types_and_saves_by_ref(stack, tmp_path):
    remember = stack.state()["remember"]
    checkbox = await _centre_of(stack, 'check_box[name="Remember me"]')
    token_file = tmp_path / "token"
    token_file.write_text(stack.seed.api_token + "\n", encoding="utf-8")
    shot = tmp_path / "screen.png"
    done = await _run(
        *_where(stack),
        "--token-file",
        str(token_file),
        "--screenshot",
        str(shot),
        "--click",
        checkbox,
        "--find",
        'text[name="Name"]',
        "--type",
        TEXT,
        "--submit",
        'button[name="Save"]',
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert _steps(done.stdout) == [
        "desktop_list_active",
        "screen screenshot",
        "screen click",
        "desktop_observe",
        "desktop_find",
        "desktop_type",
        "desktop_find",
        "desktop_click",
    ], done.stdout
    assert f"running: {stack.session_id}" in done.stdout
    assert f"{WIDTH}x{HEIGHT} png" in done.stdout and Image.open(shot).size == (WIDTH, HEIGHT)
    assert "'relaydesk form' of a11y_app.py" in done.stdout
    await wait_until(lambda: stack.state()["saved"] == TEXT, scaled(10), "the typed text saved")
    assert stack.state()["remember"] is (not remember), "the guarded click toggled the check box"


async def test_without_a_selector_it_prints_a_windows_tree_to_choose_from(stack):
    done = await _run(*_where(stack), token=stack.seed.api_token)
    assert done.returncode == 0, done.stdout + done.stderr
    steps = _steps(done.stdout)
    assert steps[:3] == ["desktop_list_active", "screen screenshot", "screen click"], steps
    # The click on the bare desktop may leave no window focused: then the first one listed.
    assert steps[3:] in (
        ["desktop_observe"],
        ["desktop_observe", "desktop_apps", "desktop_observe"],
    )
    assert f"({WIDTH // 2}, {HEIGHT // 2})" in done.stdout  # the centre, by default
    assert 'push_button "Save"' in done.stdout and 'check_box "Remember me"' in done.stdout


async def test_a_bad_token_ends_it_with_the_servers_message(stack):
    done = await _run(*_where(stack), token="rdk_wrong")
    assert done.returncode == 1 and done.stdout == ""
    assert "desktop_list_active: 401 unauthorized: invalid or revoked token" in done.stderr


async def test_it_says_what_is_missing(stack):
    done = await _run(*_where(stack))
    assert done.returncode == 2 and "no API token" in done.stderr


# -- a scripted server: the stale screen -------------------------------------------------------

STALE = {
    "code": "stale_screen",
    "message": "the screen changed there since that screenshot (difference 0.41 > threshold "
    "0.06); take a new screenshot and choose again",
    "hint": "take a new screenshot",
}
ROW = {
    "relay_id": "r1",
    "relay_name": "relay-1",
    "desktop_session_id": "s1",
    "kind": "virtual",
    "slot": "main",
    "state": "running",
    "geometry": "640x480",
}


@contextlib.contextmanager
def scripted_server(stale_clicks: int) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A server whose first ``stale_clicks`` clicks are refused as stale; it records the
    screen actions it receives."""
    screen: list[dict[str, Any]] = []

    def answer(name: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if name == "desktop_list_active":
            return 200, {"desktops": [ROW]}
        if name == "desktop_observe":
            return 200, {"window": "w", "app": "a", "nodes": 1, "snapshot": "s", "text": "…"}
        screen.append(body)
        if body["action"] == "screenshot":
            revision = f"sr1.shot{len(screen)}"
            return 200, {"width": 640, "height": 480, "format": "png", "screen_revision": revision}
        if sum(b["action"] == "click" for b in screen) <= stale_clicks:
            return 409, {"ok": False, "error": STALE}
        return 200, {"x": body["x"], "y": body["y"], "guard": {"checked": True}}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            status, payload = answer(self.path.rsplit("/", 1)[-1], body)
            data = json.dumps({"ok": True, **payload}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", screen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(scaled(5))


async def test_a_stale_screen_is_looked_at_again_once():
    with scripted_server(stale_clicks=1) as (url, screen):
        done = await _run("--server", url, "--conversation", "c1", token="rdk_x")
    assert done.returncode == 0, done.stdout + done.stderr
    assert [(b["action"], b.get("expected_screen_revision")) for b in screen] == [
        ("screenshot", None),
        ("click", "sr1.shot1"),
        ("screenshot", None),
        ("click", "sr1.shot3"),
    ]
    assert "(320, 240) refused: stale_screen" in done.stdout
    assert all(b["desktop_session_id"] == "s1" for b in screen), "every call names the desktop"


async def test_a_screen_that_stays_stale_ends_it_with_the_message():
    with scripted_server(stale_clicks=2) as (url, screen):
        done = await _run("--server", url, "--conversation", "c1", token="rdk_x")
    assert done.returncode == 1
    assert [b["action"] for b in screen] == ["screenshot", "click", "screenshot", "click"]
    assert "screen: 409 stale_screen: the screen changed there" in done.stderr
    assert "(take a new screenshot)" in done.stderr and "desktop_observe" not in done.stdout
