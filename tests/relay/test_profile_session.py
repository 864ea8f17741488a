"""What a profile puts into a session, without an X server: the panel's launchers (one per app,
never a second time through a comment), Chromium's prepared profile directory, and run-once
programs that are reaped at start instead of staying zombies."""

from __future__ import annotations

import os
import re
import sys
import time
from pathlib import Path

import psutil
import pytest

from relay.desktops.launch import _reap_one_shots
from relay.desktops.process import ChildProcess, DesktopProcesses
from relay.desktops.profiles import fill_placeholders, install_home_files, load_profiles

pytestmark = pytest.mark.unit

STANDARD = load_profiles()["standard"]
LAUNCHER_LINE = re.compile(r"^launcher_item_app = (\S+)$", re.MULTILINE)


def _home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    return home


def test_the_panel_gets_exactly_one_launcher_per_app(tmp_path: Path) -> None:
    home = _home(tmp_path)
    install_home_files(STANDARD, home, None)
    rc = (home / ".config/relaydesk/tint2rc").read_text()
    entries = home / ".local/share/applications"
    expected = [str(entries / app.desktop_entry) for app in STANDARD.apps]
    assert LAUNCHER_LINE.findall(rc) == expected
    assert rc.count("launcher_item_app") == len(STANDARD.apps)  # none inside a comment
    assert "@LAUNCHERS@" not in rc and "@MENU@" not in rc
    for path in expected:
        assert Path(path).is_file()


def test_a_comment_naming_the_placeholder_stays_one_comment() -> None:
    text = "# the relay fills @LAUNCHERS@ in\n@LAUNCHERS@\nbutton_lclick_command = @MENU@\n"
    filled = fill_placeholders(text, "launcher_item_app = a\nlauncher_item_app = b", "jgmenu")
    assert filled.splitlines() == [
        "# the relay fills @LAUNCHERS@ in",
        "launcher_item_app = a",
        "launcher_item_app = b",
        "button_lclick_command = jgmenu",
    ]


def test_chromium_finds_its_profile_directory_already_past_first_run(tmp_path: Path) -> None:
    home = _home(tmp_path)
    install_home_files(STANDARD, home, None)
    chromium = STANDARD.app("chromium")
    argv = STANDARD.expand(chromium.exec, home)
    profile_dir = home / ".config/relaydesk-chromium"
    assert f"--user-data-dir={profile_dir}" in argv
    assert (profile_dir / "First Run").is_file()
    assert "--no-sandbox" not in argv
    for flag in (
        "--no-first-run",
        "--disable-background-networking",
        "--disable-sync",
        "--disable-component-update",
        "--password-store=basic",
        "--no-default-browser-check",
    ):
        assert flag in argv
    assert STANDARD.start[0] == "chromium"  # spawned first: it takes longest to show


def test_the_wallpaper_runs_once() -> None:
    assert STANDARD.once == frozenset({"wallpaper"})
    assert "wallpaper" in STANDARD.start


def _spawn(name: str, *argv: str) -> ChildProcess:
    return ChildProcess.spawn(name, [sys.executable, *argv], env=dict(os.environ), essential=False)


async def test_a_run_once_program_is_reaped_and_leaves_the_process_set() -> None:
    procs = DesktopProcesses()
    done = procs.add(_spawn("wallpaper", "-c", "pass"))
    keeps = procs.add(_spawn("panel", "-c", "import time; time.sleep(30)"))
    try:
        await _reap_one_shots(procs, [done], time.monotonic() + 10)
        assert procs.children == [keeps]
        assert not psutil.pid_exists(done.pid)  # reaped: not even a zombie
    finally:
        await procs.stop(2.0)


async def test_a_run_once_program_still_running_stays_and_stops_with_the_desktop() -> None:
    procs = DesktopProcesses()
    slow = procs.add(_spawn("wallpaper", "-c", "import time; time.sleep(30)"))
    started = time.monotonic()
    await _reap_one_shots(procs, [slow], started + 0.2)
    assert time.monotonic() - started < 5
    assert procs.children == [slow] and slow.is_alive()
    assert await procs.stop(2.0)
    assert not slow.is_alive()
