"""``benchmarks/bench_replica_storm.py`` on a small fleet: every check whole, every figure shown.

The quick run is 60 simulated relays (``QUICK_RELAYS``) over three replicas on real PostgreSQL
and Redis behind HAProxy, one replica killed. Its timings are printed against their targets
and not asserted (no timing thresholds in tests); what the run checks is: every relay welcomed
and owned, every list answered with the conversation's rows on every replica, every relay of
the killed replica owned again by a live one, the dead replica reaped, no live replica taken
for dead, and the database's view whole again after the storm.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.bench_replica_storm import QUICK_RELAYS
from tests.support.processes import scaled

pytestmark = [pytest.mark.bench, pytest.mark.postgres, pytest.mark.redis]

REPO_ROOT = Path(__file__).resolve().parents[2]
QUICK_RUN_TIMEOUT_S = 150.0
CHECK = re.compile(r"^check (?P<name>.+): (?P<got>\d+)/(?P<wanted>\d+)$", re.MULTILINE)
VERDICT = re.compile(r"^verdict (?P<name>[^:]+): .*: (PASS|FAIL)$", re.MULTILINE)
REQUIRED_CHECKS = (
    "relays welcomed",
    "relays owned",
    "replicas alive throughout",
    "replicas alive at the kill",
    "survivors alive throughout the storm",
    "relays of the killed replica re-owned",
    "relays welcomed again",
    "dead replica reaped",
    "relays recorded connected",
    "fleet desktops listed running",
    *(f"{phase} r{n} list answered" for phase in ("idle", "with relays") for n in (1, 2, 3)),
    *(f"after the storm r{n} list answered" for n in (2, 3)),
)
REQUIRED_VERDICTS = (
    "welcome",
    "re-own",
    "seen dead",
    "reaped",
    "list with relays r1",
    "rss after the storm r2",
)


@pytest.mark.timeout(scaled(QUICK_RUN_TIMEOUT_S) + 30)
def test_quick_storm_reowns_every_relay_and_answers_the_list_everywhere() -> None:
    result = subprocess.run(
        [sys.executable, "benchmarks/bench_replica_storm.py", "--quick"],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=scaled(QUICK_RUN_TIMEOUT_S),
        check=False,
    )
    print(result.stdout)  # the figures, shown with -rA
    output = f"--- stdout\n{result.stdout}\n--- stderr\n{result.stderr[-5000:]}"
    checks = {m["name"]: (int(m["got"]), int(m["wanted"])) for m in CHECK.finditer(result.stdout)}
    for name in REQUIRED_CHECKS:
        assert name in checks, f"no check of {name!r}\n{output}"
    assert checks["relays welcomed"] == (QUICK_RELAYS, QUICK_RELAYS), output
    assert checks["relays of the killed replica re-owned"][1] > 0, output
    broken = {name: figures for name, figures in checks.items() if figures[0] != figures[1]}
    assert not broken, f"checks not whole: {broken}\n{output}"
    verdicts = {m["name"] for m in VERDICT.finditer(result.stdout)}
    assert set(REQUIRED_VERDICTS) <= verdicts, output
    assert result.returncode == 0, output
