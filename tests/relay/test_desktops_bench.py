"""Smoke runs of the desktop benchmarks (``--quick``); the full runs are manual."""

from __future__ import annotations

import shutil

import pytest

from benchmarks import bench_desktop_start, bench_x11vnc_flags

pytestmark = [
    pytest.mark.bench,
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("Xvfb") is None, reason="Xvfb is not installed"),
]


def test_bench_desktop_start_quick(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_desktop_start.main(["--quick"]) == 0
    out = capsys.readouterr().out
    assert "p50/target" in out
    assert "idle CPU" in out


def test_bench_x11vnc_flags_quick(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_x11vnc_flags.main(["--quick"]) == 0
    out = capsys.readouterr().out
    assert "p50 vs base" in out
    assert "chosen" in out
