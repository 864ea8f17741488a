"""The desktop tools in-process: settings, the shell/file switch, the command runner (on this
process's own user, no desktop) and the file commands' child. ``tests/integration/
test_desktop_tools.py`` runs them in real desktops."""

from __future__ import annotations

import asyncio
import base64
import os
import signal
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from relay.config import RelayConfigError, RelaySettings
from relay.desktop_tools import file_child
from relay.desktop_tools.files import CHILD_SOURCE
from relay.desktop_tools.run import run_in_desktop
from relay.desktop_tools.service import SHELL_OFF, DesktopTools
from relay.desktop_tools.session import DesktopSession, session_of
from relay.desktop_tools.settings import DesktopToolsConfigError, DesktopToolSettings
from relay.desktops.process import ChildProcess, DesktopProcesses
from relay.handlers import Handlers
from tests.support.processes import scaled
from wire.errors import ErrorCode, OpError
from wire.ids import RequestId
from wire.messages import Request

pytestmark = pytest.mark.unit


# -- settings and the switch ------------------------------------------------------------------


@pytest.mark.parametrize(("raw", "on"), [("", False), ("0", False), ("1", True), ("yes", True)])
def test_shell_is_off_unless_opted_in(raw: str, on: bool) -> None:
    assert DesktopToolSettings.from_env({"RELAYDESK_CUA_SHELL": raw}).cua_shell is on
    assert DesktopToolSettings.from_env({}).cua_shell is False


def test_a_bad_shell_setting_stops_the_relay_with_a_message() -> None:
    with pytest.raises(DesktopToolsConfigError):
        DesktopToolSettings.from_env({"RELAYDESK_CUA_SHELL": "maybe"})
    env = {"RELAYDESK_CUA_SHELL": "maybe", "RELAYDESK_RELAY_TOKEN": "t"}
    with pytest.raises(RelayConfigError, match="RELAYDESK_CUA_SHELL"):
        RelaySettings.from_env("http://127.0.0.1:1", None, environ=env)
    settings = RelaySettings.from_env(
        "http://127.0.0.1:1",
        None,
        environ={"RELAYDESK_CUA_SHELL": "1", "RELAYDESK_RELAY_TOKEN": "t"},
    )
    assert settings.tools.cua_shell is True


@pytest.mark.parametrize(
    ("op", "args"),
    [("desktop.shell", {"command": "id"}), ("desktop.file", {"op": "exists", "path": "x"})],
)
async def test_shell_and_file_ops_are_refused_when_off(op: str, args: dict[str, Any]) -> None:
    handlers = Handlers(tools=DesktopToolSettings(cua_shell=False))
    request = Request(RequestId("r-1"), op, {"desktop_session_id": "s-1", **args}, 1000)
    with pytest.raises(OpError) as info:
        await handlers.dispatch(None, request)  # type: ignore[arg-type]
    assert (info.value.code, info.value.message) == (ErrorCode.FORBIDDEN, SHELL_OFF)


def test_the_shell_capability_is_announced_only_when_on() -> None:
    assert DesktopTools(DesktopToolSettings(cua_shell=True)).capabilities() == ["shell"]
    assert DesktopTools(DesktopToolSettings()).capabilities() == []


async def test_a_desktop_the_relay_does_not_run_has_no_tools() -> None:
    class LocalBackend:
        kind = "local"

    with pytest.raises(OpError) as info:
        await session_of(
            LocalBackend(),  # type: ignore[arg-type]
            {
                "desktop_session_id": "s",
                "kind": "local",
                "slot": "main",
                "state": "running",
            },
        )
    assert info.value.code is ErrorCode.UNAVAILABLE
    assert info.value.message.startswith("local desktops have no window")


# -- the runner ---------------------------------------------------------------------------------


def _session(tmp_path: Path, joined: list[ChildProcess] | None = None) -> DesktopSession:
    processes = DesktopProcesses()

    async def join(session_id: str, child: ChildProcess) -> bool:
        processes.add(child)
        if joined is not None:
            joined.append(child)
        return True

    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)}
    return DesktopSession("s-1", ":99", env, None, processes, join)


async def test_a_command_runs_in_the_home_with_closed_stdin(tmp_path: Path) -> None:
    joined: list[ChildProcess] = []
    session = _session(tmp_path, joined)
    done = await run_in_desktop(
        session,
        "shell",
        ["/bin/sh", "-c", "pwd; cat; echo e >&2; exit 4"],
        timeout_s=scaled(10),
        cap=1024,
    )
    assert (done.stdout.text(), done.stderr.text()) == (f"{tmp_path}\n", "e\n")
    assert (done.returncode, done.timed_out, done.truncated) == (4, False, False)
    assert len(joined) == 1 and session.processes.children == []  # tracked, then dropped


async def test_input_bytes_reach_the_command(tmp_path: Path) -> None:
    data = os.urandom(300_000)
    done = await run_in_desktop(
        _session(tmp_path), "f", ["/bin/cat"], timeout_s=scaled(10), cap=len(data), stdin=data
    )
    assert bytes(done.stdout.data) == data and not done.truncated


async def test_output_past_the_cap_is_dropped_and_said(tmp_path: Path) -> None:
    done = await run_in_desktop(
        _session(tmp_path),
        "shell",
        ["/bin/sh", "-c", "head -c 100000 /dev/zero"],
        timeout_s=scaled(10),
        cap=1000,
    )
    assert len(done.stdout.data) == 1000 and done.truncated and done.returncode == 0


async def test_the_time_limit_kills_the_whole_group(tmp_path: Path) -> None:
    started = time.monotonic()
    done = await run_in_desktop(
        _session(tmp_path),
        "shell",
        ["/bin/sh", "-c", "sleep 30 & echo $!; sleep 31"],
        timeout_s=0.5,
        cap=1000,
    )
    assert time.monotonic() - started < scaled(5)
    assert (done.returncode, done.timed_out) == (None, True)
    background = int(done.stdout.text().split()[0])
    deadline = time.monotonic() + scaled(5)
    while psutil.pid_exists(background) and psutil.Process(background).status() != "zombie":
        assert time.monotonic() < deadline, "the background job survived"
        await asyncio.sleep(0.02)


async def test_a_background_job_does_not_hold_the_answer(tmp_path: Path) -> None:
    session = _session(tmp_path)
    started = time.monotonic()
    done = await run_in_desktop(
        session, "shell", ["/bin/sh", "-c", "sleep 30 & echo $!"], timeout_s=scaled(10), cap=1000
    )
    assert time.monotonic() - started < scaled(3)
    assert (done.returncode, done.timed_out) == (0, False)
    background = int(done.stdout.text().split()[0])
    # the group stays tracked (it stops with the desktop) until the job ends
    (child,) = session.processes.children
    assert child.name == "shell" and psutil.pid_exists(background)
    os.killpg(child.pgid, signal.SIGKILL)


async def test_a_cancelled_command_is_killed(tmp_path: Path) -> None:
    session = _session(tmp_path)
    task = asyncio.create_task(
        run_in_desktop(session, "shell", ["/bin/sleep", "30"], timeout_s=30, cap=10)
    )
    while not session.processes.children:
        await asyncio.sleep(0.01)
    (child,) = session.processes.children
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert child.group_gone()


async def test_a_program_that_cannot_start_is_unavailable(tmp_path: Path) -> None:
    with pytest.raises(OpError) as info:
        await run_in_desktop(
            _session(tmp_path), "x", [str(tmp_path / "missing")], timeout_s=1, cap=10
        )
    assert info.value.code is ErrorCode.UNAVAILABLE


# -- the file commands' child -------------------------------------------------------------------


def _ask(tmp_path: Path, op: str, path: str, **extra: Any) -> dict[str, Any]:
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        return file_child.answer({"op": op, "path": path, "limit": 64, **extra})
    finally:
        os.chdir(cwd)


def test_the_file_child_round_trips(tmp_path: Path) -> None:
    assert _ask(tmp_path, "mkdir", "d/e") == {"ok": True, "result": {"done": True}}
    assert _ask(tmp_path, "write_text", "d/t.txt", content="é")["ok"]
    assert _ask(tmp_path, "write_text", "d/t.txt", content="!", append=True)["ok"]
    assert _ask(tmp_path, "read_text", "d/t.txt")["result"] == {"content": "é!"}
    assert _ask(tmp_path, "size", "d/t.txt")["result"] == {"size": 3}
    assert _ask(tmp_path, "list_dir", "d")["result"] == {"files": ["e", "t.txt"]}
    assert _ask(tmp_path, "exists", "d")["result"] == {"exists": False}
    assert _ask(tmp_path, "dir_exists", "d")["result"] == {"exists": True}
    blob = base64.b64encode(b"\x00\x01\x02\x03").decode()
    assert _ask(tmp_path, "write_bytes", "d/b", content=blob)["ok"]
    part = _ask(tmp_path, "read_bytes", "d/b", offset=1, length=2)["result"]["content_b64"]
    assert base64.b64decode(part) == b"\x01\x02"
    assert _ask(tmp_path, "delete_file", "d/b")["ok"] and not (tmp_path / "d" / "b").exists()
    assert _ask(tmp_path, "delete_dir", "d/e")["ok"] and not (tmp_path / "d" / "e").exists()


@pytest.mark.parametrize(
    ("op", "path", "extra", "code"),
    [
        ("read_text", "none.txt", {}, "not_found"),
        ("read_text", "big.txt", {}, "limit_reached"),
        ("read_text", "latin.txt", {}, "action_failed"),
        ("write_bytes", "b", {"content": "***"}, "invalid_args"),
        ("delete_dir", "full", {}, "action_failed"),
    ],
)
def test_the_file_child_answers_errors_with_codes(
    tmp_path: Path, op: str, path: str, extra: dict[str, Any], code: str
) -> None:
    (tmp_path / "big.txt").write_text("x" * 65)
    (tmp_path / "latin.txt").write_bytes(b"\xe9t\xe9")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "f").touch()
    answer = _ask(tmp_path, op, path, **extra)
    assert (answer["ok"], answer["code"]) == (False, code), answer


def test_the_file_childs_source_is_ascii() -> None:
    # It travels as a command-line argument, decoded in whatever locale the desktop has.
    assert CHILD_SOURCE.read_text(encoding="utf-8").isascii()


def test_the_file_child_refuses_what_its_user_may_not(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root may read anything")
    locked = tmp_path / "locked"
    locked.write_text("no")
    locked.chmod(0)
    assert _ask(tmp_path, "read_text", "locked")["code"] == "forbidden"
