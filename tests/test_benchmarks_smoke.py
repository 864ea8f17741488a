"""Every ``benchmarks/bench_*.py`` runs to completion in ``--quick`` mode and reports a result."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.docker import BUILD_TIMEOUT_S, build_images, require_docker
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
# The images a quick run needs: its test builds them, or finds them built earlier in the run
# (tests/support/docker.py), so it passes whatever ran before it. It runs in the docker tier's
# group (one worker, one after another: tests/support/scheduling.py), beside the tests that
# build and run the same tags.
IMAGES_OF = {"bench_docker_desktops": ("desktop",)}
RESULT_LINE = re.compile(r"ratio|p50", re.IGNORECASE)


def _param(script: Path) -> object:
    """``script`` as a test case; one that needs images has the time to build them too."""
    run_s = scaled(QUICK_RUN_TIMEOUT_S) + 30
    if script.stem not in IMAGES_OF:
        # Each quick run is a unit of work of its own (tests/support/scheduling.py): it checks
        # that the benchmark runs and reports, not its figures, so runs may share the machine.
        marks = [pytest.mark.timeout(run_s), pytest.mark.xdist_group(f"quick-{script.stem}")]
        return pytest.param(script, id=script.stem, marks=marks)
    marks = [
        pytest.mark.xdist_group("docker"),
        pytest.mark.timeout(scaled(BUILD_TIMEOUT_S) + run_s),
    ]
    return pytest.param(script, id=script.stem, marks=marks)


@pytest.fixture
def images(script: Path) -> None:
    """The Docker images ``script`` needs (none for most)."""
    if targets := IMAGES_OF.get(script.stem):
        require_docker()
        build_images(*targets)


@pytest.mark.bench
@pytest.mark.parametrize("script", [_param(path) for path in BENCHMARKS])
@pytest.mark.usefixtures("images")
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
