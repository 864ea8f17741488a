"""The desktop tools end to end: an in-process server, two real relay processes, a real desktop
on each, driven through the HTTP actions.

``relay-1`` runs with the defaults (shell and file commands off) and a desktop with openbox and
two xterms: its windows and clipboard are checked with independent X queries (python-xlib on
the relay's authority file) and an independent ``xclip -o`` run as the desktop's user.
``shell-relay`` runs with ``RELAYDESK_CUA_SHELL=1``: what its shell and file commands did is
read from the processes and the file system, not from the tools under test. The last test
stops that desktop and checks nothing the tools started outlives it.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import pwd
import subprocess
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
import pytest_asyncio

from tests.support.processes import ProcessTracker, scaled
from tests.support.stack import (
    Seed,
    add_relay,
    inprocess_server,
    seed_database,
    start_relay,
    wait_until,
)
from wire.ids import RelayId

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

TERM, OTHER = "tools-term", "tools-other"
SHELL_OFF = "shell and file commands are off on this relay: start it with RELAYDESK_CUA_SHELL=1"
CLIPBOARD_MAX = 1_000_000


@dataclass
class Desk:
    """One relay and the desktop it runs."""

    relay: str
    relay_id: str
    state_dir: Path
    session_id: str = ""
    display: str = ""

    def record(self) -> dict[str, Any]:
        """The desktop as its relay's state file records it (pids, home, environment)."""
        data = json.loads((self.state_dir / "desktops.json").read_text(encoding="utf-8"))
        (desktop,) = [d for d in data["desktops"] if d["desktop_session_id"] == self.session_id]
        found: dict[str, Any] = desktop
        return found

    def user(self) -> pwd.struct_passwd:
        """The desktop's user: the owner of its home."""
        return pwd.getpwuid(os.stat(self.record()["home"]).st_uid)


@dataclass
class Stack:
    app: Any
    url: str
    seed: Seed
    plain: Desk
    shell: Desk

    async def act(
        self, name: str, desk: Desk | None = None, token: str | None = None, **body: Any
    ) -> tuple[int, dict[str, Any]]:
        payload = {"conversation_id": self.seed.conversation_id, **body}
        if desk is not None:
            payload["relay"] = desk.relay
        headers = {"Authorization": f"Bearer {token or self.seed.api_token}"}
        async with httpx.AsyncClient(base_url=self.url, timeout=scaled(60)) as client:
            response = await client.post(f"/api/v1/actions/{name}", json=payload, headers=headers)
        return response.status_code, response.json()

    async def ok(self, name: str, desk: Desk, **body: Any) -> dict[str, Any]:
        status, result = await self.act(name, desk, **body)
        assert status == 200, result
        return result

    async def window_id(self, title: str) -> int:
        listed = await self.ok("desktop_windows", self.plain)
        (window,) = [w for w in listed["windows"] if w["name"] == title]
        return int(window["id"])


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    root = tmp_path_factory.mktemp("desktop-tools")
    seed = await seed_database(root / "data")
    second = await add_relay(seed, "shell-relay")
    tracker = ProcessTracker(root / "processes")
    plain = Desk("relay-1", seed.relay["relay_id"], root / "data" / "relay-state")
    shell = Desk("shell-relay", second["relay_id"], root / "data" / "shell-relay-state")
    apps = f"xterm -T {TERM},xterm -T {OTHER}"
    async with inprocess_server(seed) as (app, url):
        relays = [
            start_relay(
                tracker.start,
                seed,
                url,
                name="relay1",
                env={
                    "RELAYDESK_DESKTOP_APPS": apps,
                    "DISPLAY": "",
                },
                extra_args=("--stop-desktops-on-exit",),
            ),
            start_relay(
                tracker.start,
                seed,
                url,
                second["token"],
                name="relay2",
                env={
                    "RELAYDESK_DESKTOP_APPS": ",",
                    "DISPLAY": "",
                    "RELAYDESK_CUA_SHELL": "1",
                    "RELAYDESK_STATE_DIR": str(shell.state_dir),
                },
                extra_args=("--stop-desktops-on-exit",),
            ),
        ]
        try:
            hub = app.state.parts.relays
            await wait_until(
                lambda: all(hub.is_connected(RelayId(d.relay_id)) for d in (plain, shell)),
                20,
                "both relays to connect",
            )
            stack = Stack(app, url, seed, plain, shell)
            for desk in (plain, shell):
                started = await stack.ok(
                    "desktop_start", desk, geometry="1280x800", profile="minimal"
                )
                desk.session_id = started["desktop"]["desktop_session_id"]
                desk.display = started["desktop"]["display"]
            yield stack
        except BaseException:
            for relay in relays:
                print(relay.log_tail())
            raise
        finally:
            tracker.cleanup()


# -- independent views of the desktop -----------------------------------------------------


def _x_view(display_name: str, window_id: int) -> dict[str, Any]:
    """What the X server says of a window: client geometry in root coordinates, its EWMH
    state names, whether it is listed and active."""
    from Xlib import X, Xatom
    from Xlib import display as xdisplay

    conn = xdisplay.Display(display_name)
    try:
        root = conn.screen().root

        def ints(window: Any, name: str, kind: int) -> list[int]:
            prop = window.get_full_property(conn.intern_atom(name), kind)
            return list(prop.value) if prop is not None else []

        clients = ints(root, "_NET_CLIENT_LIST", Xatom.WINDOW)
        view: dict[str, Any] = {
            "listed": window_id in clients,
            "active": ints(root, "_NET_ACTIVE_WINDOW", X.AnyPropertyType),
        }
        if window_id in clients:
            window = conn.create_resource_object("window", window_id)
            size = window.get_geometry()
            origin = root.translate_coords(window, 0, 0)
            states = ints(window, "_NET_WM_STATE", Xatom.ATOM)
            view |= {
                "x": origin.x,
                "y": origin.y,
                "width": size.width,
                "height": size.height,
                "title": window.get_wm_name(),
                "states": {conn.get_atom_name(a) for a in states},
            }
        return view
    finally:
        conn.close()


async def _x(stack: Stack, window_id: int) -> dict[str, Any]:
    return await asyncio.to_thread(_x_view, stack.plain.display, window_id)


def _as_desktop_user(desk: Desk, argv: list[str]) -> subprocess.CompletedProcess[bytes]:
    """Run ``argv`` as the desktop's user with the desktop's session environment."""
    record = desk.record()
    user = desk.user()
    ids: dict[str, Any] = {}
    if os.geteuid() == 0:
        ids = {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}
    return subprocess.run(
        argv,
        env=record["session_env"],
        cwd=record["home"],
        capture_output=True,
        timeout=scaled(10),
        check=False,
        **ids,
    )


def _xclips(desk: Desk) -> list[psutil.Process]:
    """The live xclip processes serving the desktop's display."""
    return [
        p
        for p in psutil.process_iter(["name", "environ", "status"])
        if p.info["name"] == "xclip"
        and p.info["status"] != psutil.STATUS_ZOMBIE
        and (p.info["environ"] or {}).get("DISPLAY") == desk.display
    ]


def _error(body: dict[str, Any], status: int, got: int, code: str) -> dict[str, Any]:
    assert (got, body["ok"], body["error"]["code"]) == (status, False, code), body
    error: dict[str, Any] = body["error"]
    return error


# -- windows ------------------------------------------------------------------------------


async def test_windows_are_listed_with_the_x_servers_geometry(stack):
    async def both_listed() -> bool:
        listed = await stack.ok("desktop_windows", stack.plain)
        return {TERM, OTHER} <= {w["name"] for w in listed["windows"]}

    await wait_until(both_listed, 30, "both xterms to show")
    listed = await stack.ok("desktop_windows", stack.plain)
    assert listed["desktop_session_id"] == stack.plain.session_id
    window = next(w for w in listed["windows"] if w["name"] == TERM)
    assert set(window) == {
        "id",
        "name",
        "pid",
        "app",
        "x",
        "y",
        "width",
        "height",
        "active",
        "minimized",
    }
    assert window["app"] == "xterm" and isinstance(window["pid"], int)
    assert psutil.Process(window["pid"]).name() == "xterm"
    seen = await _x(stack, window["id"])
    assert seen["title"] == TERM
    geometry = (window["x"], window["y"], window["width"], window["height"])
    assert geometry == (seen["x"], seen["y"], seen["width"], seen["height"])
    active = [w["id"] for w in listed["windows"] if w["active"]]
    assert active == [listed["active"]] and seen["active"] == active, (listed, seen)


async def test_move_and_resize_show_in_the_x_server(stack):
    window_id = await stack.window_id(OTHER)
    moved = await stack.ok(
        "desktop_window", stack.plain, window_id=window_id, op="move", x=120, y=140
    )
    assert moved == {
        "ok": True,
        "desktop_session_id": stack.plain.session_id,
        "window_id": window_id,
        "op": "move",
        "done": True,
    }
    seen = await _x(stack, window_id)
    assert (seen["x"], seen["y"]) == (120, 140), seen
    await stack.ok(
        "desktop_window", stack.plain, window_id=window_id, op="resize", width=500, height=300
    )
    seen = await _x(stack, window_id)
    # xterm sizes itself in whole character cells: a few pixels under what was asked
    assert 470 <= seen["width"] <= 500 and 270 <= seen["height"] <= 300, seen
    assert (seen["x"], seen["y"]) == (120, 140), seen
    listed = await stack.ok("desktop_windows", stack.plain)
    window = next(w for w in listed["windows"] if w["id"] == window_id)
    assert (window["x"], window["y"], window["width"], window["height"]) == (
        seen["x"],
        seen["y"],
        seen["width"],
        seen["height"],
    )


async def test_maximize_minimize_and_activate_show_in_the_x_server(stack):
    window_id = await stack.window_id(OTHER)
    await stack.ok("desktop_window", stack.plain, window_id=window_id, op="maximize")
    seen = await _x(stack, window_id)
    assert {"_NET_WM_STATE_MAXIMIZED_VERT", "_NET_WM_STATE_MAXIMIZED_HORZ"} <= seen["states"]
    assert seen["width"] >= 1200, seen
    await stack.ok("desktop_window", stack.plain, window_id=window_id, op="minimize")
    seen = await _x(stack, window_id)
    assert "_NET_WM_STATE_HIDDEN" in seen["states"], seen
    listed = await stack.ok("desktop_windows", stack.plain)
    assert next(w for w in listed["windows"] if w["id"] == window_id)["minimized"] is True
    await stack.ok("desktop_window", stack.plain, window_id=window_id, op="activate")
    seen = await _x(stack, window_id)
    assert "_NET_WM_STATE_HIDDEN" not in seen["states"] and seen["active"] == [window_id], seen
    other = await stack.window_id(TERM)
    await stack.ok("desktop_window", stack.plain, window_id=other, op="activate")
    assert (await _x(stack, other))["active"] == [other]


async def test_close_ends_the_window(stack):
    window_id = await stack.window_id(OTHER)
    closed = await stack.ok("desktop_window", stack.plain, window_id=window_id, op="close")
    assert closed["done"] is True and closed["op"] == "close"
    assert (await _x(stack, window_id))["listed"] is False
    listed = await stack.ok("desktop_windows", stack.plain)
    assert OTHER not in {w["name"] for w in listed["windows"]}


async def test_an_unknown_window_is_not_found(stack):
    status, body = await stack.act("desktop_window", stack.plain, window_id=1, op="activate")
    error = _error(body, 404, status, "not_found")
    assert "window_id" in error["message"]


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({"op": "close"}, "window_id"),
        ({"window_id": 5, "op": "explode"}, "op"),
        ({"window_id": 5, "op": "move", "x": 3}, "y"),
        ({"window_id": 5, "op": "resize", "width": 0, "height": 10}, "width"),
        ({"window_id": 5, "op": "move", "x": 40000, "y": 1}, "x"),
        ({"window_id": 5, "op": "close", "x": 1}, "x"),
        ({"window_id": "5", "op": "close"}, "window_id"),
    ],
)
async def test_bad_window_arguments_name_the_field(stack, args, field):
    status, body = await stack.act("desktop_window", stack.plain, **args)
    error = _error(body, 400, status, "invalid_args")
    assert error["message"].startswith(f"{field}:"), error


# -- clipboard ----------------------------------------------------------------------------


async def test_clipboard_set_then_get_and_an_independent_read(stack):
    text = "relaydesk ✓ clipboard\nline two — ünïcode"
    done = await stack.ok("desktop_clipboard_set", stack.plain, text=text)
    assert done == {"ok": True, "desktop_session_id": stack.plain.session_id, "set": True}
    got = await stack.ok("desktop_clipboard_get", stack.plain)
    assert (got["text"], got["truncated"]) == (text, False)
    # the selection keeps being served after the call, to any client of the desktop's user
    await asyncio.sleep(0.3)
    read = await asyncio.to_thread(
        _as_desktop_user, stack.plain, ["xclip", "-selection", "clipboard", "-o"]
    )
    assert read.returncode == 0, read.stderr
    assert read.stdout.decode("utf-8") == text
    servers = [p for p in stack.plain.record()["processes"] if p["name"] == "clipboard"]
    assert len(servers) == 1, servers
    # the server is xclip's forked child, in the recorded group, as the desktop's user
    (server,) = _xclips(stack.plain)
    assert os.getpgid(server.pid) == servers[0]["pgid"]
    assert server.username() == stack.plain.user().pw_name


async def test_a_new_clipboard_text_replaces_the_old_one(stack):
    await stack.ok("desktop_clipboard_set", stack.plain, text="first")
    await stack.ok("desktop_clipboard_set", stack.plain, text="second")
    assert (await stack.ok("desktop_clipboard_get", stack.plain))["text"] == "second"
    # the earlier servers are stopped, not piled up (the state file is rewritten on the
    # desktop's next change: it may still name the one before)
    (live,) = _xclips(stack.plain)
    servers = [p for p in stack.plain.record()["processes"] if p["name"] == "clipboard"]
    assert len(servers) <= 2 and os.getpgid(live.pid) == servers[-1]["pgid"], servers


async def test_an_empty_clipboard_reads_as_empty_text(stack):
    got = await stack.ok("desktop_clipboard_get", stack.shell)
    assert got["text"] == "" and got["desktop_session_id"] == stack.shell.session_id


async def test_too_long_clipboard_text_names_the_field(stack):
    status, body = await stack.act(
        "desktop_clipboard_set", stack.plain, text="x" * (CLIPBOARD_MAX + 1)
    )
    error = _error(body, 400, status, "invalid_args")
    assert error["message"].startswith("text:"), error


# -- shell and files: off by default --------------------------------------------------------


async def test_shell_and_files_are_off_unless_the_relay_opts_in(stack):
    status, body = await stack.act("desktop_shell", stack.plain, command="id")
    assert _error(body, 403, status, "forbidden")["message"] == SHELL_OFF
    status, body = await stack.act("desktop_file", stack.plain, op="exists", path="x")
    assert _error(body, 403, status, "forbidden")["message"] == SHELL_OFF
    hub = stack.app.state.parts.relays
    assert "shell" not in hub.capabilities(RelayId(stack.plain.relay_id))
    assert "shell" in hub.capabilities(RelayId(stack.shell.relay_id))


# -- shell --------------------------------------------------------------------------------


async def test_a_command_runs_as_the_desktops_user_in_its_session(stack):
    command = "id -un; echo $HOME; echo $DISPLAY; pwd; echo oops >&2; exit 3"
    ran = await stack.ok("desktop_shell", stack.shell, command=command)
    user = stack.shell.user()
    record = stack.shell.record()
    assert ran["stdout"].splitlines() == [
        user.pw_name,
        record["home"],
        stack.shell.display,
        record["home"],
    ]
    assert (ran["stderr"], ran["returncode"], ran["timed_out"], ran["truncated"]) == (
        "oops\n",
        3,
        False,
        False,
    )
    if os.geteuid() == 0:
        assert user.pw_uid != 0


async def test_a_commands_stdin_is_closed(stack):
    ran = await stack.ok(
        "desktop_shell", stack.shell, command="cat; readlink /proc/self/fd/0", timeout_s=10
    )
    assert (ran["stdout"], ran["returncode"], ran["timed_out"]) == ("/dev/null\n", 0, False)


async def test_a_command_is_killed_with_its_group_at_the_time_limit(stack):
    loop = asyncio.get_running_loop()
    started = loop.time()
    command = "sleep 60 & echo $!; sleep 61; echo never"
    ran = await stack.ok("desktop_shell", stack.shell, command=command, timeout_s=1)
    assert loop.time() - started < scaled(8)
    assert (ran["timed_out"], ran["returncode"]) == (True, None)
    background = int(ran["stdout"].split()[0])
    assert "never" not in ran["stdout"]
    await wait_until(lambda: not psutil.pid_exists(background), 5, "the background job to die")


async def test_a_commands_output_is_capped(stack):
    command = "head -c 3000000 /dev/zero | tr '\\0' a; echo tail >&2"
    ran = await stack.ok("desktop_shell", stack.shell, command=command)
    assert len(ran["stdout"]) == 1024 * 1024 and set(ran["stdout"]) == {"a"}
    assert (ran["truncated"], ran["stderr"], ran["returncode"]) == (True, "tail\n", 0)


@pytest.mark.parametrize(
    ("args", "field", "status"),
    [
        ({}, "command", 400),
        ({"command": ""}, "command", 400),
        ({"command": "true", "timeout_s": 0.5}, "timeout_s", 400),
        ({"command": "true", "timeout_s": 301}, "timeout_s", 400),
    ],
)
async def test_bad_shell_arguments_name_the_field(stack, args, field, status):
    got, body = await stack.act("desktop_shell", stack.shell, **args)
    error = _error(body, status, got, "invalid_args")
    assert error["message"].startswith(f"{field}:"), error


# -- files --------------------------------------------------------------------------------


async def test_file_commands_round_trip_as_the_desktops_user(stack: Stack) -> None:
    desk = stack.shell

    async def file(op: str, path: str, **extra: Any) -> dict[str, Any]:
        return await stack.ok("desktop_file", desk, op=op, path=path, **extra)

    home = Path(desk.record()["home"])
    assert (await file("mkdir", "tools/sub"))["done"] is True
    assert (home / "tools" / "sub").is_dir()
    assert (await file("write_text", "tools/a.txt", content="héllo\n"))["done"] is True
    await file("write_text", "~/tools/a.txt", content="wörld\n", append=True)
    on_disk = home / "tools" / "a.txt"
    assert on_disk.read_text(encoding="utf-8") == "héllo\nwörld\n"
    assert on_disk.stat().st_uid == desk.user().pw_uid
    assert (await file("read_text", str(on_disk)))["content"] == "héllo\nwörld\n"
    assert (await file("exists", "tools/a.txt"))["exists"] is True
    assert (await file("exists", "tools/sub"))["exists"] is False
    assert (await file("dir_exists", "tools/sub"))["exists"] is True
    assert (await file("list_dir", "tools"))["files"] == ["a.txt", "sub"]
    assert (await file("size", "tools/a.txt"))["size"] == len("héllo\nwörld\n".encode())
    blob = bytes(range(256))
    await file("write_bytes", "tools/b.bin", content=base64.b64encode(blob).decode())
    assert (home / "tools" / "b.bin").read_bytes() == blob
    part = await file("read_bytes", "tools/b.bin", offset=10, length=5)
    assert base64.b64decode(part["content_b64"]) == blob[10:15]
    whole = await file("read_bytes", "tools/b.bin")
    assert base64.b64decode(whole["content_b64"]) == blob
    assert whole["desktop_session_id"] == desk.session_id
    await file("delete_file", "tools/b.bin")
    assert not (home / "tools" / "b.bin").exists()
    status, body = await stack.act("desktop_file", desk, op="delete_dir", path="tools")
    assert status >= 400 and body["ok"] is False  # not empty
    await file("delete_dir", "tools/sub")
    assert not (home / "tools" / "sub").exists()
    status, body = await stack.act("desktop_file", desk, op="read_text", path="tools/none")
    assert "tools/none" in _error(body, 404, status, "not_found")["message"]


async def test_file_commands_have_the_desktop_users_permissions(stack):
    if os.geteuid() != 0:
        pytest.skip("the desktop runs as the relay's own user")
    with tempfile.NamedTemporaryFile(dir="/tmp", delete=False) as secret:
        secret.write(b"root only")
    try:
        os.chmod(secret.name, 0o600)
        status, body = await stack.act(
            "desktop_file", stack.shell, op="read_text", path=secret.name
        )
        _error(body, 403, status, "forbidden")
        ran = await stack.ok("desktop_shell", stack.shell, command=f"cat {secret.name}")
        assert ran["returncode"] != 0 and "root only" not in ran["stdout"]
    finally:
        os.unlink(secret.name)


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({"op": "write_text", "path": "a.txt"}, "content"),
        ({"op": "chmod", "path": "a.txt"}, "op"),
        ({"op": "read_text", "path": ""}, "path"),
        ({"op": "read_text", "path": "a.txt", "append": True}, "append"),
        ({"op": "read_bytes", "path": "a.txt", "length": 0}, "length"),
        ({"op": "write_bytes", "path": "b.bin", "content": "not base64!"}, "content"),
    ],
)
async def test_bad_file_arguments_name_the_field(stack, args, field):
    status, body = await stack.act("desktop_file", stack.shell, **args)
    error = _error(body, 400, status, "invalid_args")
    assert error["message"].startswith(f"{field}:"), error


# -- roles --------------------------------------------------------------------------------


async def test_a_read_member_may_neither_read_nor_change_the_desktop(stack):
    from server import admin
    from server.db.records import parse_role
    from server.db.store import Store

    store = await Store.open(stack.seed.database_url)
    try:
        user = await admin.create_user(store, "tools-reader")
        token = (await admin.create_token(store, "tools-reader"))["token"]
        await store.add_member(stack.seed.conversation_id, user["user_id"], parse_role("read"))
    finally:
        await store.close()
    window_id = await stack.window_id(TERM)
    refused = {
        # window titles and the clipboard are desktop content (docs/http-api.md)
        "desktop_windows": {},
        "desktop_clipboard_get": {},
        "desktop_window": {"window_id": window_id, "op": "minimize"},
        "desktop_clipboard_set": {"text": "nope"},
        "desktop_shell": {"command": "true"},
        "desktop_file": {"op": "exists", "path": "x"},
    }
    for name, args in refused.items():
        status, body = await stack.act(
            name, stack.shell if "file" in name or "shell" in name else stack.plain, token, **args
        )
        _error(body, 403, status, "forbidden")
    assert (await _x(stack, window_id))["states"].isdisjoint({"_NET_WM_STATE_HIDDEN"})


# -- nothing outlives the desktop ------------------------------------------------------------


async def test_what_the_tools_started_stops_with_the_desktop(stack):
    desk = stack.shell
    await stack.ok("desktop_clipboard_set", desk, text="kept until the desktop stops")
    ran = await stack.ok("desktop_shell", desk, command="sleep 300 >/dev/null 2>&1 & echo $!")
    background = int(ran["stdout"].split()[0])
    servers = [p["pid"] for p in desk.record()["processes"] if p["name"] == "clipboard"]
    assert servers and psutil.pid_exists(background)
    clipboard = [p.pid for p in _xclips(desk)]
    assert clipboard
    await stack.ok(
        "desktop_stop_confirm",
        desk,
        kind="virtual",
        slot="main",
        desktop_session_id=desk.session_id,
    )
    for pid in [background, *clipboard]:
        await wait_until(
            lambda pid=pid: (
                not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
            ),
            10,
            f"process {pid} to stop with its desktop",
        )
