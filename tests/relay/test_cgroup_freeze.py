"""The cgroup freezer a pause uses (relay/desktops/cgroups.py): a looping process in a desktop's
cgroup gets no CPU while frozen, runs again once thawed, and a frozen cgroup is killed whole.
Real cgroup2, as root (docs/desktops.md, "Pause and resume")."""

from __future__ import annotations

import os
import secrets
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from relay.desktops import cgroups

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="desktop cgroups need a root relay"),
]


@pytest.fixture
def looping() -> Iterator[tuple[Path, subprocess.Popen[bytes]]]:
    parent = cgroups.relay_cgroups(f"test-freeze-{secrets.token_hex(4)}")
    assert parent is not None, "this host gives desktops no cgroup"
    cgroup = cgroups.create(parent, secrets.token_hex(16))
    assert cgroup is not None
    proc = subprocess.Popen(["nice", "-n", "19", "sh", "-c", "while :; do :; done"])
    try:
        assert cgroups.enter(cgroup, proc.pid)
        yield cgroup, proc
    finally:
        cgroups.kill(cgroup)
        proc.wait(timeout=10)
        cgroups.remove_if_empty(parent)


def _used_over(cgroup: Path, seconds: float) -> int:
    before = cgroups.cpu_usec(cgroup)
    time.sleep(seconds)
    after = cgroups.cpu_usec(cgroup)
    assert before is not None and after is not None
    return after - before


def test_frozen_uses_no_cpu_and_thawed_runs_again(
    looping: tuple[Path, subprocess.Popen[bytes]],
) -> None:
    cgroup, _ = looping
    assert _used_over(cgroup, 0.5) > 0
    assert cgroups.freeze(cgroup, True)
    assert cgroups.is_frozen(cgroup)
    assert "frozen 1" in (cgroup / "cgroup.events").read_text()
    assert _used_over(cgroup, 1.0) == 0
    assert cgroups.freeze(cgroup, False)
    assert not cgroups.is_frozen(cgroup)
    assert _used_over(cgroup, 0.5) > 0


def test_a_frozen_cgroup_is_killed_whole(looping: tuple[Path, subprocess.Popen[bytes]]) -> None:
    cgroup, proc = looping
    assert cgroups.freeze(cgroup, True)
    assert cgroups.kill(cgroup)
    assert proc.wait(timeout=10) == -9
    assert not cgroup.exists()


def test_a_cgroup_without_a_freezer_says_so(tmp_path: Path) -> None:
    assert cgroups.freeze(tmp_path / "gone", True, timeout_s=0.1) is False
    assert cgroups.is_frozen(tmp_path / "gone") is False
    assert cgroups.cpu_usec(tmp_path / "gone") is None
