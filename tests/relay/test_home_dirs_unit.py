"""Desktop homes made side by side (blocking ``prepare_home`` in threads, as the relay's
starts and its pool's fill run it): a parent that another start made a moment earlier is
taken as made, never a failed start."""

from __future__ import annotations

import stat
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from relay.desktops.credentials import PRIVATE_DIR_MODE
from relay.desktops.user import prepare_home

pytestmark = pytest.mark.unit

STARTS = 8
ROUNDS = 40


def test_homes_made_at_once_share_their_new_parents(tmp_path: Path) -> None:
    failures: list[BaseException] = []
    for round_no in range(ROUNDS):
        sessions = tmp_path / f"round-{round_no}" / "homes" / "sessions"
        together = threading.Barrier(STARTS)

        def start(
            index: int, sessions: Path = sessions, together: threading.Barrier = together
        ) -> Path:
            together.wait()
            return prepare_home(sessions / f"desk-{index}", None, fresh=True)

        with ThreadPoolExecutor(STARTS) as pool:
            futures = [pool.submit(start, i) for i in range(STARTS)]
        failures += [e for f in futures if (e := f.exception()) is not None]
        homes = sorted(p.name for p in sessions.iterdir())
        assert homes == [f"desk-{i}" for i in range(STARTS)], failures
        for directory in (sessions, sessions.parent):
            assert stat.S_IMODE(directory.lstat().st_mode) == PRIVATE_DIR_MODE
    assert failures == []
