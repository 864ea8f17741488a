"""Nothing orphaned: a relay killed mid-start, a relay that never comes back, sound directories.

Real Xvfb, x11vnc, websockify, D-Bus and PulseAudio (docs/desktops.md, "Relay restarts" and
"Orphan guard").
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from relay.desktops import DesktopSettings, process_desktops
from relay.desktops.audio import (
    AudioSettings,
    PulseAudioStarter,
    display_number,
    runtime_dir,
    socket_path,
)
from relay.desktops.displays import x_display_alive
from tests.relay.conftest import live_groups, pgids_of, pid_of, record_for, state_records
from tests.support.processes import scaled
from tests.support.stack import wait_until
from wire.errors import InvalidArgs

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]

# A relay in miniature: it starts one desktop and is SIGKILLed by the test mid-start.
_STARTER = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from relay.desktops import DesktopSettings, process_desktops

    async def main() -> None:
        config = DesktopSettings(state_dir=Path(sys.argv[1]), apps=("sleep 600",),
                               allowed_apps=("sleep 600",), start_timeout_s=60,
                               default_profile="minimal")
        await process_desktops(config).start(slot="main")
        await asyncio.sleep(600)

    asyncio.run(main())
    """
)


# The same, whose record of its websockify hangs (as a slow disk's fsync can): it is killed
# after websockify was spawned and before the state file names it.
_STUCK_RECORDING = textwrap.dedent(
    """
    import asyncio, sys, time
    from pathlib import Path
    from relay.desktops import DesktopSettings, process_desktops
    from relay.desktops.starter import Starter

    record = Starter._record
    def stuck(self, session_id, child):
        if child.name == "websockify":
            print(child.pid, flush=True)
            time.sleep(600)
        record(self, session_id, child)
    Starter._record = stuck

    async def main() -> None:
        config = DesktopSettings(state_dir=Path(sys.argv[1]), apps=(), window_manager=(),
                               start_timeout_s=60, default_profile="minimal")
        await process_desktops(config).start(slot="main")

    asyncio.run(main())
    """
)


def _starting_records(config: DesktopSettings) -> list[dict[str, Any]]:
    try:
        data = json.loads(config.state_file.read_text())
    except (OSError, ValueError):
        return []
    return list(data.get("starting") or [])


def _names(record: dict[str, Any]) -> set[str]:
    return {str(p["name"]) for p in record["processes"]}


def _processes_naming(path: Path) -> list[psutil.Process]:
    """Live processes whose command line mentions ``path`` (Xvfb's and x11vnc's -auth, the
    guard's state file): what a relay of that state directory started."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        cmdline = proc.info["cmdline"] or []
        if proc.info["status"] != psutil.STATUS_ZOMBIE and any(str(path) in a for a in cmdline):
            found.append(proc)
    return found


async def _kill_mid_start(config: DesktopSettings) -> dict[str, Any]:
    """Run a relay in miniature, SIGKILL it once its start is half done; the start's record."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    relay = subprocess.Popen(
        [sys.executable, "-c", _STARTER, str(config.state_dir)], env=env, start_new_session=True
    )
    try:
        # Killed once Xvfb and websockify run, before x11vnc: a start half done.
        half_done = {"Xvfb", "websockify"}
        await wait_until(
            lambda: any(half_done <= _names(r) for r in _starting_records(config)),
            20,
            "the start to record its first children",
            interval=0.005,
        )
    finally:
        os.killpg(relay.pid, signal.SIGKILL)
        relay.wait()
    [interrupted] = _starting_records(config)
    assert live_groups(pgids_of(interrupted)), "the kill should have left the start's processes"
    assert state_records(config) == []
    return interrupted


async def test_a_relay_killed_mid_start_leaves_nothing_the_next_one_cannot_remove(
    light_config: DesktopSettings,
) -> None:
    interrupted = await _kill_mid_start(light_config)
    successor = process_desktops(light_config)
    try:
        assert await successor.adopt() == []
        assert not live_groups(pgids_of(interrupted))
        assert not _processes_naming(light_config.state_dir)
        assert _starting_records(light_config) == []
        assert list(light_config.run_dir.iterdir()) == [light_config.authority_file]
    finally:
        await successor.close(stop_desktops=True)


async def test_a_child_spawned_but_not_yet_recorded_never_runs_without_its_relay(
    light_config: DesktopSettings,
) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    relay = subprocess.Popen(
        [sys.executable, "-c", _STUCK_RECORDING, str(light_config.state_dir)],
        env=env,
        start_new_session=True,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert relay.stdout is not None
        line = await asyncio.wait_for(asyncio.to_thread(relay.stdout.readline), scaled(30))
        websockify = int(line)
    finally:
        os.killpg(relay.pid, signal.SIGKILL)
        relay.wait()
    # Unrecorded, so no later relay could find it: it must go by itself (it was held, and
    # its hold pipe lost its writer with the relay).
    await wait_until(lambda: not live_groups([websockify]), 10, "the unrecorded child to go")
    successor = process_desktops(light_config)
    try:
        assert await successor.adopt() == []
    finally:
        await successor.close(stop_desktops=True)
    assert not _processes_naming(light_config.state_dir)


async def test_a_restarted_relay_adopts_first_and_stops_what_was_left_after(
    light_config: DesktopSettings,
) -> None:
    # What a relay process does: say hello once the desktops are adopted, stop the rest after.
    interrupted = await _kill_mid_start(light_config)
    successor = process_desktops(light_config)
    try:
        assert await successor.adopt(clean_up_later=True) == []
        # Not stopped yet, and still recorded: a relay killed now leaves them to the next one.
        assert [r["desktop_session_id"] for r in _starting_records(light_config)] == [
            interrupted["desktop_session_id"]
        ]
        assert await successor.status() == []
    finally:
        await successor.close(stop_desktops=True)  # waits for the clean-up
    assert not live_groups(pgids_of(interrupted))
    assert not _processes_naming(light_config.state_dir)
    assert _starting_records(light_config) == []
    assert list(light_config.run_dir.iterdir()) == [light_config.authority_file]


def _segments_of(pid: int) -> list[str]:
    """SysV shared memory segments ``pid`` created (attached or not)."""
    rows = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
    return [r.split()[1] for r in rows if int(r.split()[4]) == pid]


async def test_a_stop_cut_short_by_its_caller_still_runs_to_its_end(
    light_config: DesktopSettings,
) -> None:
    # The server's connection closing (a server restart) cancels what the relay was answering:
    # a stop cancelled after x11vnc's SIGKILL used to leave its shared memory and the private
    # directory behind.
    manager = process_desktops(light_config)
    try:
        row = await manager.start()
        session = row["desktop_session_id"]
        record = record_for(light_config, session)
        x11vnc = pid_of(record, "x11vnc")
        await wait_until(lambda: _segments_of(x11vnc), 10, "x11vnc's shared memory")
        stop = asyncio.create_task(
            manager.stop(kind="virtual", slot="main", desktop_session_id=session)
        )
        await wait_until(
            lambda: manager.live(session) is None, 10, "the stop to begin", interval=0.001
        )
        stop.cancel()
        with pytest.raises(asyncio.CancelledError):
            await stop
        assert not live_groups(pgids_of(record))
        assert not _segments_of(x11vnc), "x11vnc's shared memory was left behind"
        assert not (light_config.run_dir / session).exists()
        assert state_records(light_config) == []
    finally:
        await manager.close(stop_desktops=True)


async def test_a_desktop_stops_itself_when_its_relay_never_comes_back(
    light_config: DesktopSettings,
) -> None:
    config = dataclasses.replace(light_config, orphan_timeout_s=scaled(2))
    first = process_desktops(config)
    row = await first.start()
    record = record_for(config, row["desktop_session_id"])
    assert "guard" in _names(record)
    await first.close(stop_desktops=False)  # a relay stopped without --stop-desktops-on-exit
    assert live_groups(pgids_of(record)) == pgids_of(record)

    await wait_until(lambda: not live_groups(pgids_of(record)), 20, "the guard to stop it")
    assert not (config.run_dir / row["desktop_session_id"]).exists()
    assert not _processes_naming(config.state_dir)


async def test_a_relay_back_in_time_readopts_and_its_heartbeat_keeps_the_desktop(
    light_config: DesktopSettings,
) -> None:
    config = dataclasses.replace(light_config, orphan_timeout_s=scaled(3))
    first = process_desktops(config)
    row = await first.start()
    record = record_for(config, row["desktop_session_id"])
    await first.close(stop_desktops=False)
    second = process_desktops(config)
    try:
        [adopted] = await second.adopt()
        assert adopted["desktop_session_id"] == row["desktop_session_id"]
        second.start_watchdog()
        guard = next(int(p["pid"]) for p in record["processes"] if p["name"] == "guard")
        # Not a readiness wait: the point is that three timeouts pass and nothing stops.
        await asyncio.sleep(3 * config.orphan_timeout_s)
        assert psutil.pid_exists(guard)
        assert live_groups(pgids_of(record)) == pgids_of(record)
        assert [r["desktop_session_id"] for r in await second.status()] == [
            row["desktop_session_id"]
        ]
    finally:
        await second.close(stop_desktops=True)
    assert not live_groups(pgids_of(record))


async def test_zero_orphan_timeout_keeps_desktops_without_a_guard(
    light_config: DesktopSettings,
) -> None:
    config = dataclasses.replace(light_config, orphan_timeout_s=0)
    manager = process_desktops(config)
    try:
        row = await manager.start()
        assert "guard" not in _names(record_for(config, row["desktop_session_id"]))
    finally:
        await manager.close(stop_desktops=True)


def test_orphan_timeout_is_read_from_the_environment() -> None:
    assert DesktopSettings.from_env({}).orphan_timeout_s == 600
    assert DesktopSettings.from_env({"RELAYDESK_ORPHAN_TIMEOUT_S": "0"}).orphan_timeout_s == 0
    assert DesktopSettings.from_env({"RELAYDESK_ORPHAN_TIMEOUT_S": "90"}).orphan_timeout_s == 90
    with pytest.raises(InvalidArgs):
        DesktopSettings.from_env({"RELAYDESK_ORPHAN_TIMEOUT_S": "-1"})


@pytest.fixture
def pulse_settings() -> Iterator[AudioSettings]:
    """Sound directories under the system temp dir, traversable like the real root: a root
    relay's PulseAudio runs as the desktop user, who cannot enter pytest's 0700 tmp_path."""
    parent = Path(tempfile.mkdtemp(prefix="relaydesk-test-pulse-"))
    parent.chmod(0o711)
    try:
        yield AudioSettings(runtime_root=parent / "pulse")
    finally:
        shutil.rmtree(parent, ignore_errors=True)


async def _sound_server_answers(sock: Path) -> None:
    assert sock.exists(), f"{sock.parent.name}: a live desktop's sound directory was removed"
    _, writer = await asyncio.wait_for(asyncio.open_unix_connection(str(sock)), scaled(5))
    writer.close()
    await writer.wait_closed()


async def test_a_stopped_desktop_leaves_no_sound_directory(
    light_config: DesktopSettings, pulse_settings: AudioSettings
) -> None:
    settings = pulse_settings
    manager = process_desktops(light_config, audio=PulseAudioStarter(settings))
    try:
        row = await manager.start(audio=True)
        assert row["audio"] is True
        directory = runtime_dir(int((row["display"] or "")[1:]), settings.runtime_root)
        assert directory.is_dir()
        await manager.stop(
            kind="virtual", slot="main", desktop_session_id=row["desktop_session_id"]
        )
        assert not directory.exists()
    finally:
        await manager.close(stop_desktops=True)


async def test_another_relay_starting_or_a_desktop_stopping_keeps_a_live_sound_server(
    light_config: DesktopSettings, pulse_settings: AudioSettings, tmp_path: Path
) -> None:
    # Xvfb started with -displayfd writes no X lock: a relay starting on the same host must
    # still see that the display is live, or its stale cleanup takes a playing desktop's sound
    # away (apps and captures then get "Connection refused").
    root = pulse_settings.runtime_root
    manager = process_desktops(light_config, audio=PulseAudioStarter(pulse_settings))
    other = process_desktops(
        dataclasses.replace(light_config, state_dir=tmp_path / "other"),
        audio=PulseAudioStarter(pulse_settings),
    )
    try:
        playing = await manager.start(audio=True)
        stopping = await manager.start(slot="second", audio=True)
        assert playing["audio"] is True and stopping["audio"] is True
        sound = socket_path(display_number(playing["display"] or ""), root)
        dead = next(n for n in range(900, 1000) if not x_display_alive(n))
        runtime_dir(dead, root).mkdir()  # what a relay killed mid-start leaves
        await other.adopt()
        await _sound_server_answers(sound)
        assert not runtime_dir(dead, root).exists(), "a stale sound directory is still removed"
        await manager.stop(
            kind="virtual", slot="second", desktop_session_id=stopping["desktop_session_id"]
        )
        await _sound_server_answers(sound)
    finally:
        await other.close(stop_desktops=False)
        await manager.close(stop_desktops=True)
