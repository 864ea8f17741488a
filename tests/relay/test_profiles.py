"""Desktop profiles, the desktop user and kept homes, with real desktops.

One ``standard`` desktop serves the module (it is the slow one); the others are ``minimal``.
As root (CI), the desktop's session runs as the desktop user and these tests check it does.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import pytest_asyncio

from relay.desktops import DesktopSettings, ProcessDesktops, process_desktops
from relay.desktops.profiles import load_profiles
from tests.support.processes import scaled
from wire.errors import ErrorCode, InvalidArgs, OpError
from wire.ops import RelayRow

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

STANDARD = load_profiles()["standard"]
SESSION_PROGRAMS = ("xterm", "tint2", "openbox", "chromium", "dbus-daemon")
RELAY_PROGRAMS = ("Xvfb", "x11vnc")


def _config(tmp: Path, **extra: Any) -> DesktopSettings:
    return DesktopSettings(
        state_dir=tmp / "state",
        watchdog_interval_s=1.0,
        start_timeout_s=scaled(20),
        probe_timeout_s=scaled(3),
        **extra,
    )


def _x_env(config: DesktopSettings, display: str) -> dict[str, str]:
    authority = str(config.authority_file)
    return {"PATH": os.environ["PATH"], "DISPLAY": display, "XAUTHORITY": authority}


def window_titles(config: DesktopSettings, display: str) -> list[str]:
    done = subprocess.run(
        ["wmctrl", "-l"],
        env=_x_env(config, display),
        capture_output=True,
        text=True,
        timeout=scaled(10),
        check=False,
    )
    return [line.split(None, 3)[-1] for line in done.stdout.splitlines()]


async def wait_for_window(config: DesktopSettings, display: str, part: str) -> list[str]:
    deadline = asyncio.get_running_loop().time() + scaled(30)
    while True:
        titles = await asyncio.to_thread(window_titles, config, display)
        if any(part in title for title in titles):
            return titles
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"no window {part!r} among {titles}")
        await asyncio.sleep(0.2)


def session_processes(home: str) -> dict[str, list[psutil.Process]]:
    """Processes whose environment names this desktop's home, by program name."""
    found: dict[str, list[psutil.Process]] = {}
    for proc in psutil.process_iter(["name", "uids"]):
        try:
            if proc.environ().get("HOME") == home:
                found.setdefault(proc.info["name"], []).append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def standard(
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[tuple[ProcessDesktops, RelayRow]]:
    # scripts/install installs the standard profile's programs: missing ones are a failure.
    assert not STANDARD.missing(), f"standard profile needs {STANDARD.missing()}"
    os.environ.pop("DISPLAY", None)
    manager = process_desktops(_config(tmp_path_factory.mktemp("standard")))
    row = await manager.start(slot="std", profile="standard")
    try:
        yield manager, row
    finally:
        await manager.close(stop_desktops=True)


async def test_standard_desktop_has_a_panel_and_a_browser(
    standard: tuple[ProcessDesktops, dict[str, Any]],
) -> None:
    manager, row = standard
    assert row["profile"] == "standard"
    await wait_for_window(manager.config, row["display"], "Chromium")
    await wait_for_window(manager.config, row["display"], "tint2")  # the panel


async def test_session_runs_as_the_desktop_user_and_the_relay_keeps_its_own(
    standard: tuple[ProcessDesktops, dict[str, Any]],
) -> None:
    manager, row = standard
    await wait_for_window(manager.config, row["display"], "Chromium")
    desktop = manager.slots.desktops["std"]
    assert desktop.home is not None
    procs = session_processes(desktop.home)
    for name in ("xterm", "tint2", "openbox", "dbus-daemon"):
        assert name in procs, sorted(procs)
    chromium = [p for name, ps in procs.items() if "chrom" in name for p in ps]
    assert chromium, sorted(procs)
    user = await manager.desktop_user()
    for proc in [p for ps in procs.values() for p in ps]:
        uid = proc.uids().real
        assert uid == (user.uid if user else os.getuid()), (proc.name(), uid)
        if os.geteuid() == 0:
            assert uid != 0, proc.name()
    if user is None:
        return
    for name in RELAY_PROGRAMS:  # the display and the RFB server stay with the relay
        child = desktop.processes.find(name)
        assert child is not None and psutil.Process(child.pid).uids().real == os.getuid()
    # The desktop user reaches its home and its cookie, never the relay's files.
    as_user = ["setpriv", f"--reuid={user.uid}", f"--regid={user.gid}", "--clear-groups"]
    config = manager.config
    other = config.run_dir / "other-desktop"
    other.mkdir(mode=0o700, exist_ok=True)
    (other / "Xauthority").write_bytes(b"secret")
    for path in (
        config.state_file,
        config.authority_file,
        other / "Xauthority",
        config.run_dir / row["desktop_session_id"] / "vncpasswd",
    ):
        denied = subprocess.run([*as_user, "cat", str(path)], capture_output=True, timeout=10)
        assert denied.returncode != 0 and b"Permission denied" in denied.stderr, path
    listing = subprocess.run([*as_user, "ls", str(config.state_dir)], capture_output=True)
    assert listing.returncode != 0
    mine = subprocess.run([*as_user, "cat", f"{desktop.home}/.Xauthority"], capture_output=True)
    assert mine.returncode == 0


async def test_launching_the_editor_from_launchable_opens_a_window(
    standard: tuple[ProcessDesktops, dict[str, Any]],
) -> None:
    manager, row = standard
    apps = await manager.launcher.apps(row["desktop_session_id"], "std")
    ids = [app["id"] for app in apps["launchable"]]
    assert {"chromium", "pcmanfm", "mousepad", "xterm"} <= set(ids)
    answer = await manager.launcher.launch_app(None, "std", "mousepad")
    assert answer["launched"]
    await wait_for_window(manager.config, row["display"], "Mousepad")
    with pytest.raises(InvalidArgs) as bad:
        await manager.launcher.launch_app(None, "std", "rm -rf /")
    assert bad.value.details["field"] == "app"


async def _stop(manager: ProcessDesktops, slot: str, row: RelayRow) -> None:
    await manager.stop(kind="virtual", slot=slot, desktop_session_id=row["desktop_session_id"])


async def test_kept_home_survives_a_restart_until_it_is_reset(tmp_path: Path) -> None:
    manager = process_desktops(_config(tmp_path, apps=(), window_manager=()))
    try:
        row = await manager.start(slot="keep", profile="minimal", persist_home=True)
        home = Path(manager.slots.desktops["keep"].home or "")
        (home / "notes.txt").write_text("kept")
        with pytest.raises(OpError) as busy:
            await manager.launcher.reset_home("keep")
        assert busy.value.code is ErrorCode.BUSY
        await _stop(manager, "keep", row)
        row = await manager.start(slot="keep", profile="minimal", persist_home=True)
        assert (home / "notes.txt").read_text() == "kept"
        assert oct(home.stat().st_mode & 0o777) == "0o700"
        await _stop(manager, "keep", row)
        assert (await manager.launcher.reset_home("keep"))["existed"]
        row = await manager.start(slot="keep", profile="minimal", persist_home=True)
        assert not (home / "notes.txt").exists()
        fresh = await manager.start(slot="fresh", profile="minimal")
        fresh_home = Path(manager.slots.desktops["fresh"].home or "")
        visible = [p.name for p in fresh_home.iterdir() if p.name != ".Xauthority"]
        # the profile's files, the accessibility bus's socket (~/.cache/at-spi) and the GTK
        # settings cache the session's apps keep (~/.cache/dconf)
        assert visible == [] or set(visible) <= {".config", ".local", ".cache"}, visible
        cached = (
            {p.name for p in (fresh_home / ".cache").iterdir()} if ".cache" in visible else set()
        )
        assert cached <= {"at-spi", "dconf"}, cached
        assert not any(fresh_home.rglob("notes.txt"))
        await manager.stop(
            kind="virtual", slot="fresh", desktop_session_id=fresh["desktop_session_id"]
        )
        assert not fresh_home.exists()  # a fresh home goes with its desktop
    finally:
        await manager.close(stop_desktops=True)


async def test_unknown_and_unavailable_profiles_are_refused_clearly(tmp_path: Path) -> None:
    extra = tmp_path / "profiles"
    extra.mkdir()
    (extra / "cad.toml").write_text(
        'description = "CAD"\nrequires = ["relaydesk-no-such-program"]\nstart = []\n'
    )
    manager = process_desktops(_config(tmp_path, profiles_dir=extra))
    try:
        with pytest.raises(InvalidArgs) as unknown:
            await manager.start(slot="p", profile="nonesuch")
        assert unknown.value.details["field"] == "profile"
        assert "minimal" in unknown.value.message and "standard" in unknown.value.message
        with pytest.raises(OpError) as missing:
            await manager.start(slot="p", profile="cad")
        assert missing.value.code is ErrorCode.UNAVAILABLE
        assert "relaydesk-no-such-program" in missing.value.message
        status = {p["name"]: p for p in manager.launcher.profile_status()}
        assert status["cad"]["available"] is False
        assert status["minimal"]["available"] is True
        assert not manager.slots.desktops
    finally:
        await manager.close(stop_desktops=True)


async def test_the_desktop_user_is_never_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("the desktop user is used only when the relay is root")
    from relay.desktops.user import resolve_desktop_user

    with pytest.raises(OpError):
        resolve_desktop_user("root")
    user = resolve_desktop_user("relaydesk-desktop")
    assert user is not None and user.uid != 0
    assert pwd.getpwuid(user.uid).pw_name == "relaydesk-desktop"
    assert shutil.which("setpriv")
