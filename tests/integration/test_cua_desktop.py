"""Cua's commands beyond pixels, on a real desktop running a real accessible app (the tests' GTK
form): the accessibility tree and find_element from AT-SPI (not a fixed tree), windows, the
clipboard, and examples/cua_agent.py run with Cua's client. What the app did is read from the
state file it writes; windows and the clipboard from the X server.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from Xlib import display

from tests.support.a11y_stack import FORM, A11yStack, a11y_stack
from tests.support.cua import QUIET, parse_data_line, require_cua_venv
from tests.support.processes import scaled
from tests.support.stack import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = REPO_ROOT / "examples" / "cua_agent.py"
WINDOW = "relaydesk form"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[A11yStack]:
    async with a11y_stack(tmp_path_factory.mktemp("cua-desktop"), [FORM]) as stack:
        await wait_until(lambda: stack.state() != {}, scaled(30), "the form to start")
        await stack.wait_app("a11y_app.py")
        yield stack


def _base(stack: A11yStack) -> str:
    return f"{stack.url}/api/v1/conversations/{stack.seed.conversation_id}/cua/relay-1/virtual/main"


async def _cmd(stack: A11yStack, name: str, **params: Any) -> dict[str, Any]:
    headers = {"X-API-Key": stack.seed.api_token}
    async with httpx.AsyncClient(timeout=scaled(60)) as http:
        response = await http.post(
            f"{_base(stack)}/cmd", headers=headers, json={"command": name, "params": params}
        )
    assert response.status_code == 200, response.text
    return parse_data_line(response.text)


async def _ok(stack: A11yStack, name: str, **params: Any) -> dict[str, Any]:
    reply = await _cmd(stack, name, **params)
    assert reply["success"] is True, (name, reply)
    return reply


async def _centre(stack: A11yStack, selector: str) -> tuple[int, int]:
    found = await stack.ok("desktop_find", selector=selector, window=WINDOW)
    x, y, width, height = found["matches"][0]["bounds"]
    return x + width // 2, y + height // 2


def _titles(node: dict[str, Any]) -> list[tuple[str, str]]:
    found = [(str(node.get("role")), str(node.get("title")))]
    for child in node.get("children", []):
        found.extend(_titles(child))
    return found


async def test_the_accessibility_tree_is_the_apps_real_tree(stack):
    name = await stack.ok("desktop_find", selector='text[name="Name"]', window=WINDOW)
    await stack.ok("desktop_focus", ref=name["matches"][0]["ref"])
    reply = await _ok(stack, "get_accessibility_tree")
    titles = _titles(reply["tree"])
    assert ("push_button", "Save") in titles, titles
    assert ("check_box", "Remember me") in titles, titles
    save = next(n for n in _walk(reply["tree"]) if n.get("title") == "Save")
    assert save["size"]["width"] > 0 and save["ref"].startswith("@")


def _walk(node: dict[str, Any]) -> list[dict[str, Any]]:
    nodes = [node]
    for child in node.get("children", []):
        nodes.extend(_walk(child))
    return nodes


async def test_find_element_finds_by_role_and_title_and_its_ref_acts(stack):
    reply = await _ok(stack, "find_element", role="push button", title="Save")
    element = reply["element"]
    assert element["title"] == "Save" and element["role"] == "push_button"
    assert element["position"]["x"] >= 0 and element["size"]["height"] > 0
    missing = await _ok(stack, "find_element", title="No such button anywhere")
    assert missing["element"] is None
    before = stack.state()["clicks"]
    await stack.ok("desktop_click", ref=element["ref"])
    await wait_until(lambda: stack.state()["clicks"] > before, scaled(10), "the save")


def _x_window_name(disp: str, window_id: int) -> str:
    conn = display.Display(disp)
    try:
        window = conn.create_resource_object("window", window_id)
        name = window.get_full_property(conn.intern_atom("_NET_WM_NAME"), 0)
        return bytes(name.value).decode() if name else str(window.get_wm_name())
    finally:
        conn.close()


async def test_windows_are_listed_named_and_moved(stack):
    stack.seed.use_relay_authority()
    window_id = (await _ok(stack, "get_current_window_id"))["window_id"]
    assert isinstance(window_id, int)
    name = (await _ok(stack, "get_window_name", window_id=window_id))["name"]
    assert name == WINDOW == _x_window_name(stack.display, window_id)
    assert (
        window_id in (await _ok(stack, "get_application_windows", app="relaydesk form"))["windows"]
    )
    await _ok(stack, "set_window_position", window_id=window_id, x=150, y=120)
    await _ok(stack, "set_window_size", window_id=window_id, width=520, height=400)

    async def placed() -> bool:
        size = await _ok(stack, "get_window_size", window_id=window_id)
        return (size["width"], size["height"]) == (520, 400)

    for _ in range(50):
        if await placed():
            break
        await asyncio.sleep(0.1)
    position = await _ok(stack, "get_window_position", window_id=window_id)
    assert abs(position["x"] - 150) <= 10 and abs(position["y"] - 120) <= 40, position
    wrong = await _cmd(stack, "get_window_name", window_id=12345)
    assert wrong["success"] is False and wrong["error"].startswith("not_found:")


async def test_the_clipboard_round_trips(stack):
    text = "relaydesk ✓ clipboard"
    await _ok(stack, "set_clipboard", text=text)
    assert (await _ok(stack, "copy_to_clipboard"))["content"] == text


async def test_the_cua_example_clicks_a_check_box_and_reads_the_tree(stack, tmp_path):
    remember = stack.state()["remember"]
    x, y = await _centre(stack, 'check_box[name="Remember me"]')
    token = tmp_path / "token"
    token.write_text(stack.seed.api_token)
    shot = tmp_path / "shot.png"
    args = [
        str(require_cua_venv()),
        str(EXAMPLE),
        "--server",
        stack.url,
        "--conversation",
        stack.seed.conversation_id,
        "--relay",
        "relay-1",
        "--token-file",
        str(token),
        "--screenshot",
        str(shot),
        "--click",
        f"{x},{y}",
    ]
    done = await asyncio.to_thread(
        subprocess.run,
        args,
        env={**os.environ, **QUIET},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=scaled(120),
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    steps = [line.split()[0] for line in done.stdout.splitlines()]
    assert steps == ["ready", "screen", "screenshot", "click", "a11y"], done.stdout
    assert shot.read_bytes().startswith(b"\x89PNG")
    await wait_until(
        lambda: stack.state()["remember"] is (not remember),
        scaled(10),
        "the guarded click to toggle the check box",
    )


async def test_shell_commands_are_off_unless_the_relay_opts_in(stack):
    for command, params in (
        ("run_command", {"command": "id -un"}),
        ("create_dir", {"path": "made"}),
        ("open", {"target": "/tmp"}),
    ):
        refused = await _cmd(stack, command, **params)
        assert refused["success"] is False and "RELAYDESK_CUA_SHELL" in refused["error"], refused
    headers = {"Authorization": f"Bearer {stack.seed.api_token}"}
    async with httpx.AsyncClient(timeout=scaled(30)) as http:
        listed = (await http.get(f"{_base(stack)}/commands", headers=headers)).json()
    assert "run_command" not in listed["commands"] and "shell" not in listed["aliases"]


async def test_the_cua_examples_help_describes_conversation_ids_as_they_are() -> None:
    done = subprocess.run(
        [str(require_cua_venv()), str(EXAMPLE), "--help"],
        capture_output=True,
        text=True,
        timeout=scaled(60),
    )
    assert done.returncode == 0, done.stderr
    assert "32 hex characters" in done.stdout
    assert "c_…" not in done.stdout


def _home(stack: A11yStack) -> Path:
    state = stack.seed.data_dir / "relay-state" / "desktops.json"
    (desktop,) = [
        d
        for d in json.loads(state.read_text(encoding="utf-8"))["desktops"]
        if d["desktop_session_id"] == stack.session_id
    ]
    return Path(desktop["home"])


async def test_file_commands_work_in_the_home_without_the_shell_opt_in(stack):
    home = _home(stack)
    await _ok(stack, "write_text", path="cua/notes.txt", content="héllo\n")
    await _ok(stack, "write_text", path="~/cua/notes.txt", content="wörld\n", append=True)
    on_disk = home / "cua" / "notes.txt"
    assert on_disk.read_text(encoding="utf-8") == "héllo\nwörld\n"
    assert on_disk.stat().st_uid == home.stat().st_uid
    assert (await _ok(stack, "read_text", path="cua/notes.txt"))["content"] == "héllo\nwörld\n"
    blob = bytes(range(256))
    await _ok(stack, "write_bytes", path="cua/b.bin", content_b64=base64.b64encode(blob).decode())
    assert (home / "cua" / "b.bin").read_bytes() == blob
    part = await _ok(stack, "read_bytes", path="cua/b.bin", offset=10, length=5)
    assert base64.b64decode(part["content_b64"]) == blob[10:15]
    assert (await _ok(stack, "get_file_size", path="cua/b.bin"))["size"] == 256
    assert (await _ok(stack, "file_exists", path="cua/b.bin"))["exists"] is True
    assert (await _ok(stack, "file_exists", path="cua"))["exists"] is False
    assert (await _ok(stack, "file_exists", path="nowhere/x"))["exists"] is False
    assert (await _ok(stack, "directory_exists", path="cua"))["exists"] is True
    assert (await _ok(stack, "list_dir", path="cua"))["files"] == ["b.bin", "notes.txt"]
    for name in ("cua/b.bin", "cua/notes.txt"):
        await _ok(stack, "delete_file", path=name)
    await _ok(stack, "delete_dir", path="cua")
    assert not (home / "cua").exists()
    refused = await _cmd(stack, "read_text", path="/etc/passwd")
    assert refused["success"] is False and "path_outside_home" in refused["error"], refused
    headers = {"Authorization": f"Bearer {stack.seed.api_token}"}
    async with httpx.AsyncClient(timeout=scaled(30)) as http:
        listed = (await http.get(f"{_base(stack)}/commands", headers=headers)).json()
    assert {"read_text", "write_bytes", "list_dir", "delete_dir"} <= set(listed["commands"])
