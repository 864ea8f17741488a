"""A desktop stays inside its bounds: what it starts dies with it, its user cannot make the root
relay write through a link, its home and temporary files are bounded, and a kept home is out
of reach of whoever holds its account later.

Real Xvfb, x11vnc, websockify, D-Bus and PulseAudio, as root like CI (docs/desktops.md,
"Desktop user" and "Stopping whole").
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from relay.desktops import DesktopSettings, ProcessDesktops, process_desktops
from relay.desktops.audio import AudioSettings, PulseAudioStarter
from relay.desktops.displays import clean_stale_x_locks
from relay.desktops.homes import Homes
from relay.desktops.leases import (
    REMEMBERED_NAME,
    lease_configured,
    lease_from_pool,
    proc_hides_processes,
    relay_key,
    taken_by_another,
)
from relay.desktops.user import DesktopUser
from tests.relay.conftest import record_for
from tests.support.processes import scaled
from tests.support.stack import wait_until
from wire.errors import OpError
from wire.ops import RelayRow

pytestmark = pytest.mark.integration

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="desktop users need a root relay")


def _survivor_app() -> tuple[str, str]:
    """An app that leaves a program in a session of its own (``setsid``), and its marker."""
    marker = f"{600 + secrets.randbelow(10**6) / 10**6:.6f}"
    return f"setsid sleep {marker}", marker


def _sleepers(marker: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if proc.info["cmdline"] == ["sleep", marker] and proc.info["status"] != "zombie":
            found.append(proc)
    return found


def _config(base: DesktopSettings, app: str, **changes: Any) -> DesktopSettings:
    return dataclasses.replace(base, apps=(app,), allowed_apps=(app,), **changes)


async def _started_survivor(manager: ProcessDesktops, marker: str, **start: Any) -> RelayRow:
    row = await manager.start(**start)
    await wait_until(lambda: _sleepers(marker), 10, "the setsid program to run")
    [proc] = _sleepers(marker)
    user = await manager.desktop_user()
    if user is not None:
        assert proc.uids().real == user.uid
    assert os.getsid(proc.pid) == proc.pid, "it left the desktop's sessions"
    return row


async def test_a_setsid_program_dies_with_its_desktops_stop(light_config: DesktopSettings) -> None:
    app, marker = _survivor_app()
    manager = process_desktops(_config(light_config, app))
    try:
        row = await _started_survivor(manager, marker)
        await manager.stop(
            kind="virtual", slot="main", desktop_session_id=row["desktop_session_id"]
        )
        assert not _sleepers(marker), "a setsid program outlived desktop_stop"
    finally:
        await manager.close(stop_desktops=True)
        for proc in _sleepers(marker):
            proc.kill()


async def test_a_setsid_program_dies_with_the_stop_before_a_reset_of_home(
    light_config: DesktopSettings,
) -> None:
    app, marker = _survivor_app()
    manager = process_desktops(_config(light_config, app))
    try:
        row = await _started_survivor(manager, marker, slot="kept", persist_home=True)
        await manager.stop(
            kind="virtual", slot="kept", desktop_session_id=row["desktop_session_id"]
        )
        await manager.launcher.reset_home("kept")
        assert not _sleepers(marker), "a setsid program outlived desktop_reset_home"
    finally:
        await manager.close(stop_desktops=True)
        for proc in _sleepers(marker):
            proc.kill()


async def test_a_setsid_program_dies_with_the_relays_exit(light_config: DesktopSettings) -> None:
    app, marker = _survivor_app()
    manager = process_desktops(_config(light_config, app))
    try:
        await _started_survivor(manager, marker)
    finally:
        await manager.close(stop_desktops=True)
    survivors = _sleepers(marker)
    for proc in survivors:
        proc.kill()
    assert not survivors, "a setsid program outlived the relay"


async def test_an_adopted_desktop_keeps_its_cgroup_and_an_orphan_dies_whole(
    light_config: DesktopSettings,
) -> None:
    kept_app, kept = _survivor_app()
    orphan_app, orphan = _survivor_app()
    config = dataclasses.replace(light_config, apps=(), allowed_apps=(kept_app, orphan_app))
    first = process_desktops(config)
    stopped = False
    try:
        row = await first.start(slot="kept", apps=[kept_app])
        dying = await first.start(slot="dying", apps=[orphan_app])
        await wait_until(lambda: _sleepers(kept) and _sleepers(orphan), 10, "both programs")
        record = record_for(config, dying["desktop_session_id"])
        x11vnc = next(p["pid"] for p in record["processes"] if p["name"] == "x11vnc")
        os.kill(x11vnc, 9)  # the successor's probe fails: that desktop is not kept
        await first.close(stop_desktops=False)
        stopped = True
        second = process_desktops(config)
        try:
            [adopted] = await second.adopt()
            assert adopted["desktop_session_id"] == row["desktop_session_id"]
            assert not _sleepers(orphan), "a desktop that was not re-adopted left a survivor"
            assert _sleepers(kept), "an adopted desktop lost a program"
            await second.stop(
                kind="virtual", slot="kept", desktop_session_id=row["desktop_session_id"]
            )
            assert not _sleepers(kept), "an adopted desktop's setsid program outlived its stop"
        finally:
            await second.close(stop_desktops=True)
    finally:
        if not stopped:
            await first.close(stop_desktops=True)
        for proc in _sleepers(kept) + _sleepers(orphan):
            proc.kill()


async def test_the_orphan_guard_kills_the_whole_desktop(light_config: DesktopSettings) -> None:
    app, marker = _survivor_app()
    config = _config(light_config, app, orphan_timeout_s=1.0)
    manager = process_desktops(config)
    try:
        await _started_survivor(manager, marker)
        await manager.close(stop_desktops=False)  # no heartbeat from now on
        await wait_until(lambda: not _sleepers(marker), 20, "the guard to kill the desktop")
    finally:
        for proc in _sleepers(marker):
            proc.kill()


@ROOT_ONLY
async def test_nothing_of_the_desktop_user_runs_once_no_desktop_does(
    light_config: DesktopSettings,
) -> None:
    # What a desktop's shell command leaves is not in the desktop's cgroup: the last stop
    # still kills every process of the relay's desktop user.
    manager = process_desktops(light_config)
    stray = None
    try:
        row = await manager.start()
        user = await manager.desktop_user()
        assert user is not None
        stray = subprocess.Popen(
            ["sleep", "600"], user=user.uid, group=user.gid, extra_groups=[], start_new_session=True
        )
        await asyncio.sleep(0.2)
        assert stray.poll() is None
        await manager.stop(
            kind="virtual", slot="main", desktop_session_id=row["desktop_session_id"]
        )
        await wait_until(lambda: stray.poll() is not None, 5, "the stray program to die")
    finally:
        await manager.close(stop_desktops=True)
        if stray is not None and stray.poll() is None:
            stray.kill()
            stray.wait()


# -- the sound directory ------------------------------------------------------------------


@pytest.fixture
def pulse_settings() -> Iterator[AudioSettings]:
    parent = Path(tempfile.mkdtemp(prefix="relaydesk-test-pulse-"))
    parent.chmod(0o711)
    try:
        yield AudioSettings(runtime_root=parent / "pulse")
    finally:
        shutil.rmtree(parent, ignore_errors=True)


def _as_user(user: DesktopUser, argv: list[str]) -> None:
    subprocess.run(
        argv,
        user=user.uid,
        group=user.gid,
        extra_groups=[],
        check=True,
        capture_output=True,
        timeout=scaled(10),
    )


class _Planting(PulseAudioStarter):
    """Wins the race the desktop user has once the sound directory is handed over: links
    every name the relay might open there to a root-only file, before the relay goes on."""

    target: Path

    def _prepare(self, display: int, user: DesktopUser | None = None) -> Path:
        directory = super()._prepare(display, user)
        assert user is not None
        for name in ("pulseaudio.log", "log", "native.lock", "pid"):
            _as_user(user, ["ln", "-s", str(self.target), str(directory / name)])
        return directory


@ROOT_ONLY
@pytest.mark.skipif(shutil.which("pulseaudio") is None, reason="scripts/install installs it")
async def test_a_link_planted_in_the_sound_directory_is_never_written_through(
    light_config: DesktopSettings, pulse_settings: AudioSettings, tmp_path: Path
) -> None:
    target = tmp_path / "root-only"
    target.write_bytes(b"root's own file\n")
    target.chmod(0o600)
    before = target.stat()
    starter = _Planting(pulse_settings)
    starter.target = target
    manager = process_desktops(light_config, audio=starter)
    try:
        for _ in range(2):  # the first and the second start
            row = await manager.start(audio=True)
            assert row["audio"] is True, row
            await manager.stop(
                kind="virtual", slot="main", desktop_session_id=row["desktop_session_id"]
            )
    finally:
        await manager.close(stop_desktops=True)
    assert target.read_bytes() == b"root's own file\n"
    after = target.stat()
    assert (after.st_uid, after.st_mode, after.st_size) == (
        before.st_uid,
        before.st_mode,
        before.st_size,
    )


# -- homes --------------------------------------------------------------------------------


async def test_the_session_has_a_private_tmpdir_gone_with_its_desktop(
    light_config: DesktopSettings,
) -> None:
    manager = process_desktops(light_config)
    try:
        row = await manager.start()
        desktop = manager.live(row["desktop_session_id"])
        assert desktop is not None
        tmpdir = Path(desktop.session_env["TMPDIR"])
        info = tmpdir.lstat()
        user = await manager.desktop_user()
        assert info.st_uid == (user.uid if user else os.getuid())
        assert info.st_mode & 0o777 == 0o700
        for parent in (tmpdir.parent, tmpdir.parent.parent):
            assert parent.lstat().st_uid == os.geteuid(), parent
            assert parent.lstat().st_mode & 0o777 in (0o700, 0o711), parent
        await manager.stop(
            kind="virtual", slot="main", desktop_session_id=row["desktop_session_id"]
        )
        assert not tmpdir.exists()
    finally:
        await manager.close(stop_desktops=True)


async def test_a_home_that_outgrows_its_limit_stops_its_desktop_with_the_reason(
    light_config: DesktopSettings,
) -> None:
    config = dataclasses.replace(light_config, home_max_mb=1, home_check_interval_s=0.2)
    recorded: list[dict[str, object]] = []

    async def on_change(event: RelayRow) -> None:
        recorded.append(dict(event))

    manager = process_desktops(config, on_change=on_change)
    try:
        row = await manager.start(persist_home=True)
        manager.start_watchdog()
        desktop = manager.live(row["desktop_session_id"])
        assert desktop is not None and desktop.home is not None
        big = Path(desktop.session_env["TMPDIR"]) / "big"
        big.write_bytes(b"\0" * (2 * 2**20))
        await wait_until(
            lambda: [e for e in recorded if e.get("state") == "failed"],
            10,
            "the desktop to be stopped",
        )
        assert manager.live(row["desktop_session_id"]) is None
        [failed] = [e for e in recorded if e.get("state") == "failed"]
        assert "more than 1 MB" in str(failed["reason"]), failed
        assert "RELAYDESK_DESKTOP_HOME_MAX_MB" in str(failed["reason"])
    finally:
        await manager.close(stop_desktops=True)


@ROOT_ONLY
async def test_a_kept_home_stays_out_of_reach_of_the_next_holder_of_its_account(
    light_config: DesktopSettings, tmp_path: Path
) -> None:
    first_config = dataclasses.replace(light_config, state_dir=tmp_path / "first")
    first = process_desktops(first_config)
    try:
        row = await first.start(slot="kept", persist_home=True)
        owner = await first.desktop_user()
        assert owner is not None
        desktop = first.live(row["desktop_session_id"])
        assert desktop is not None and desktop.home is not None
        home = Path(desktop.home)
        _as_user(owner, ["sh", "-c", f"echo alice-secret > {home}/notes.txt"])
        await first.stop(kind="virtual", slot="kept", desktop_session_id=row["desktop_session_id"])
    finally:
        await first.close(stop_desktops=True)
    # The account goes to another relay, whose desktops now run as it.
    other = process_desktops(
        dataclasses.replace(light_config, state_dir=tmp_path / "other", desktop_user=owner.name)
    )
    try:
        assert await other.desktop_user() == owner
        for argv in (["cat", str(home / "notes.txt")], ["ls", str(home)]):
            denied = subprocess.run(
                argv,
                user=owner.uid,
                group=owner.gid,
                extra_groups=[],
                capture_output=True,
                timeout=scaled(10),
                check=False,
            )
            assert denied.returncode != 0 and b"alice-secret" not in denied.stdout, argv
        # An account nobody holds, while ``other`` holds the first one; claimed for the first
        # relay until it comes back (released, it is the first free one for any relay on the
        # host), which still remembers ``owner`` as the account it ran as.
        lease = lease_from_pool(first_config.state_dir, light_config.desktop_user_pool)
        (first_config.state_dir / REMEMBERED_NAME).write_text(owner.name + "\n")
    finally:
        await other.close(stop_desktops=True)
    # The first relay comes back as another account: its kept home follows it.
    again = process_desktops(dataclasses.replace(first_config, desktop_user=lease.user.name))
    try:
        row = await again.start(slot="kept", persist_home=True)
        user = await again.desktop_user()
        assert user is not None and user != owner
        desktop = again.live(row["desktop_session_id"])
        assert desktop is not None and Path(desktop.home or "") == home
        assert (home / "notes.txt").stat().st_uid == user.uid
        _as_user(user, ["grep", "-q", "alice-secret", str(home / "notes.txt")])
    finally:
        lease.release()
        await again.close(stop_desktops=True)


def test_relays_key_their_state_directories(tmp_path: Path) -> None:
    assert relay_key(tmp_path / "a") != relay_key(tmp_path / "b")
    assert relay_key(tmp_path / "a") == relay_key(tmp_path / "x" / ".." / "a")


def test_a_proc_that_hides_other_users_processes_is_detected(tmp_path: Path) -> None:
    mounts = tmp_path / "mounts"
    for options, hidden in (
        ("rw,relatime", False),
        ("rw,hidepid=invisible", True),
        ("rw,nosuid,hidepid=2", True),
        ("rw,hidepid=1", False),
    ):
        mounts.write_text(f"sysfs /sys sysfs rw 0 0\nproc /proc proc {options} 0 0\n")
        assert proc_hides_processes(mounts) is hidden, options
    assert proc_hides_processes(tmp_path / "missing") is False


@ROOT_ONLY
def test_a_forged_x_lock_never_removes_a_live_displays_socket(tmp_path: Path) -> None:
    # Anyone may make names in the host's /tmp: a desktop program writes a lock naming a dead
    # pid for another desktop's display (Xvfb -displayfd writes none).
    (tmp_path / ".X11-unix").mkdir()
    dead = subprocess.Popen(["true"])
    dead.wait(timeout=10)
    forged = tmp_path / ".X8-lock"
    forged.write_text(f"{dead.pid:>10}\n")
    os.chown(forged, 65534, 65534)
    (tmp_path / ".X11-unix" / "X8").write_text("")
    assert clean_stale_x_locks(tmp_path) == []
    assert (tmp_path / ".X11-unix" / "X8").exists()


@ROOT_ONLY
async def test_the_last_virtual_desktop_leaves_running_containers_of_the_account_alone(
    light_config: DesktopSettings,
) -> None:
    # Desktops in containers run as the relay's account too (relay/desktops/docker/launcher.py
    # marks it busy while any runs): a virtual desktop's stop must not kill their processes.
    manager = process_desktops(light_config)
    containers = Homes(light_config)
    running = None
    try:
        row = await manager.start()
        user = await containers.desktop_user()
        assert user is not None and user == await manager.desktop_user()
        containers.mark_busy(True)
        running = subprocess.Popen(
            ["sleep", "600"], user=user.uid, group=user.gid, extra_groups=[], start_new_session=True
        )
        await manager.stop(
            kind="virtual", slot="main", desktop_session_id=row["desktop_session_id"]
        )
        assert running.poll() is None, "a container's process was killed"
        containers.mark_busy(False)
        row = await manager.start()
        await manager.stop(
            kind="virtual", slot="main", desktop_session_id=row["desktop_session_id"]
        )
        await wait_until(lambda: running.poll() is not None, 5, "the account's processes to die")
    finally:
        containers.release()
        await manager.close(stop_desktops=True)
        if running is not None and running.poll() is None:
            running.kill()
            running.wait()


# -- leases -------------------------------------------------------------------------------

_HOLDER = """
import sys, time
from pathlib import Path
from relay.desktops.leases import lease_configured
lease = lease_configured(sys.argv[1], Path(sys.argv[2]))
print("held", flush=True)
time.sleep(600)
"""


@ROOT_ONLY
def test_an_account_is_shared_by_the_same_relay_only(tmp_path: Path) -> None:
    # A relay process replacing another on the same state directory shares its account while
    # both run; a relay with another state directory never gets it.
    # Held under the same relay until the holder shares it: a released pool account is the
    # first free one for any other relay on the host (tests running alongside included).
    lease = lease_from_pool(tmp_path / "relay", 64)
    name = lease.user.name
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, name, str(tmp_path / "relay")],
        stdout=subprocess.PIPE,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        held = holder.stdout is not None and holder.stdout.readline()
        lease.release()
        assert held == b"held\n"
        with pytest.raises(OpError) as refused:
            lease_configured(name, tmp_path / "another")
        assert name in refused.value.message and refused.value.details["field"] == "desktop_user"
        assert taken_by_another(name, relay_key(tmp_path / "another"))
        shared = lease_configured(name, tmp_path / "relay")
        shared.release()
        other = lease_from_pool(tmp_path / "another", 64)
        assert other.user.name != name
        other.release()
    finally:
        holder.kill()
        holder.wait()
    assert not taken_by_another(name, relay_key(tmp_path / "another"))


@ROOT_ONLY
def test_a_pool_account_that_still_runs_processes_goes_to_no_other_relay(
    tmp_path: Path,
) -> None:
    (tmp_path / "first").mkdir()  # a relay's state directory, where it remembers its account
    first = lease_from_pool(tmp_path / "first", 64)
    user = first.user
    # Released once a process of it runs: before, another relay could take it.
    left = subprocess.Popen(["sleep", "600"], user=user.uid, group=user.gid, extra_groups=[])
    first.release()
    try:
        other = lease_from_pool(tmp_path / "other", 64)
        other.release()
        assert other.user != user, "an account with an earlier relay's processes was taken"
        again = lease_from_pool(tmp_path / "first", 64)  # its own relay takes it back
        again.release()
        assert again.user == user
    finally:
        left.kill()
        left.wait()
