"""Every ``benchmarks/bench_*.py`` runs to completion in ``--quick`` mode and reports a result."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.processes import scaled

REPO_ROOT = Path(__file__).resolve().parent.parent
# bench_docker needs the images the docker tier builds; its smoke run lives there
# (tests/docker/test_images.py). bench_soak's 3-minute run has its own time limit and checks its
# verdicts (tests/benchmarks/test_soak.py); so does bench_replica_storm's small fleet
# (tests/benchmarks/test_replica_storm.py).
OWN_SMOKE_TESTS = {"bench_docker", "bench_soak", "bench_replica_storm"}
BENCHMARKS = sorted(
    path
    for path in (REPO_ROOT / "benchmarks").glob("bench_*.py")
    if path.stem not in OWN_SMOKE_TESTS
)
QUICK_RUN_TIMEOUT_S = 240.0
RESULT_LINE = re.compile(r"ratio|p50", re.IGNORECASE)


@pytest.mark.bench
@pytest.mark.timeout(scaled(QUICK_RUN_TIMEOUT_S) + 30)
@pytest.mark.parametrize("script", BENCHMARKS, ids=[path.stem for path in BENCHMARKS])
def test_benchmark_quick_run(script: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    result = subprocess.run(
        [sys.executable, str(script.relative_to(REPO_ROOT)), "--quick"],
        cwd=REPO_ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=scaled(QUICK_RUN_TIMEOUT_S),
        check=False,
    )
    output = f"--- stdout\n{result.stdout}\n--- stderr\n{result.stderr}"
    assert result.returncode == 0, f"{script.name} exited {result.returncode}\n{output}"
    assert any(RESULT_LINE.search(line) for line in result.stdout.splitlines()), (
        f"{script.name} printed no line with a ratio or p50\n{output}"
    )
