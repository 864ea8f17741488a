"""Test-wide setup: a private environment, child-process tracking and artifact folders."""

from __future__ import annotations

import gc
import os
import re
import shutil
import tempfile
import time
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.processes import ProcessFactory, ProcessTracker
from tests.support.scheduling import (
    GROUPS_FILE_KEY,
    FileOrGroupScheduling,
    mark_groups,
    without_group,
    write_groups,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS_ROOT = REPO_ROOT / "test-artifacts"

# A test must never reach the developer's own screen, sound server or session bus: every
# desktop a test uses is one it started itself.
_HOST_SESSION_VARIABLES = ("DISPLAY", "WAYLAND_DISPLAY", "XAUTHORITY", "PULSE_SERVER")

_session_data_dir: Path | None = None


def pytest_configure(config: pytest.Config) -> None:
    """Strip the host session from the environment and point the data dir at a temp dir."""
    global _session_data_dir
    for name in _HOST_SESSION_VARIABLES:
        os.environ.pop(name, None)
    _session_data_dir = Path(tempfile.mkdtemp(prefix="relaydesk-test-data-"))
    os.environ["RELAYDESK_DATA_DIR"] = str(_session_data_dir)
    # Bare, quick desktops unless a test asks for a profile (tests/relay/test_profiles.py).
    os.environ.setdefault("RELAYDESK_DESKTOP_PROFILE", "minimal")
    # The client's package has its own distribution's folder (pyproject.toml's pytest
    # `pythonpath` puts it on this process's path): the CLI's children import it from there too.
    paths = [str(REPO_ROOT / "clients" / "python"), os.environ.get("PYTHONPATH", "")]
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Stop desktops that test relays left running (a killed relay cannot stop its own)."""
    from tests.support.stack import reap_desktops

    reaped = reap_desktops()
    if reaped:
        print(f"\nstopped {reaped} desktop(s) left behind by test relays")


def pytest_unconfigure(config: pytest.Config) -> None:
    if _session_data_dir is not None:
        shutil.rmtree(_session_data_dir, ignore_errors=True)


_phase_reports = pytest.StashKey[dict[str, pytest.TestReport]]()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Keep each phase's report on the item so fixtures can see whether the test failed."""
    report = yield
    item.stash.setdefault(_phase_reports, {})[report.when] = report
    if report.when == "call" and report.failed:
        # A failed test may leave clients (aiohttp responses, sessions) unclosed; collect them
        # now, while its event loop is still open, so their finalizers do not raise in (and
        # fail) whichever later test the garbage collector happens to run in.
        gc.collect()
    return report


def _test_failed(request: pytest.FixtureRequest) -> bool:
    reports = request.node.stash.get(_phase_reports, {})
    return any(report.failed for report in reports.values())


@pytest.fixture
def process_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ProcessFactory]:
    """Start child processes in their own groups; any still running are killed at teardown."""
    tracker = ProcessTracker(tmp_path / "processes")
    yield tracker.start
    left = tracker.cleanup()
    if _test_failed(request):
        for process in tracker.processes:
            print(f"\n----- {process.name} (pid {process.pid}) {process.log_path} -----")
            print(process.log_tail())
    elif left:
        names = ", ".join(process.name for process in left)
        print(f"process_factory: terminated processes still running at teardown: {names}")


def _artifact_dir_name(nodeid: str) -> str:
    path, _, name = nodeid.partition("::")
    stem = Path(path).with_suffix("").as_posix().removeprefix("tests/").replace("/", ".")
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", f"{stem}.{name}").strip("_")[:150]


@pytest.fixture
def artifacts_dir(request: pytest.FixtureRequest) -> Path:
    """An empty ``test-artifacts/<test>/`` folder for screenshots and other evidence."""
    path = ARTIFACTS_ROOT / _artifact_dir_name(request.node.nodeid)
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


@pytest.fixture(scope="module", autouse=True)
def _module_x_authority() -> Iterator[None]:
    """A module that opens a relay's desktops points ``XAUTHORITY`` at that relay's authority
    file (``Seed.use_relay_authority``); the next module starts without it."""
    before = os.environ.get("XAUTHORITY")
    yield
    if before is None:
        os.environ.pop("XAUTHORITY", None)
    else:
        os.environ["XAUTHORITY"] = before


# Every test belongs to exactly one tier, so `-m unit` (or any tier) selects whole layers and
# nothing silently drops out of a selection (docs in CONTRIBUTING.md).
TIERS = ("unit", "integration", "e2e", "cluster", "docker", "bench")


@pytest.hookimpl(tryfirst=True)  # before xdist names each test's group in its node id
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Fail the run, naming each test, when a test has no tier marker or more than one; under
    ``--dist loadgroup``, put the tests that share one of the machine's things in a group."""
    wrong = []
    for item in items:
        tiers = {mark.name for mark in item.iter_markers() if mark.name in TIERS}
        if len(tiers) != 1:
            wrong.append(f"{item.nodeid}: {', '.join(sorted(tiers)) or 'no tier'}")
    if wrong:
        listing = "\n  ".join(wrong)
        raise pytest.UsageError(
            f"every test needs exactly one tier marker of {', '.join(TIERS)}:\n  {listing}"
        )
    groups_file = getattr(config, "workerinput", {}).get(GROUPS_FILE_KEY)
    if groups_file is not None:  # a worker under --dist loadgroup
        write_groups(Path(groups_file), mark_groups(items, TIERS))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """``--dist loadgroup``: a whole file or a whole group per worker (tests/support/
    scheduling.py)."""
    if config.getoption("dist") != "loadgroup":
        return None
    return FileOrGroupScheduling(config, log, _groups_file())


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """Under ``--dist loadgroup``, each worker writes the tests' groups where the controller's
    scheduler reads them."""
    if node.config.getoption("dist") == "loadgroup":
        node.workerinput[GROUPS_FILE_KEY] = str(_groups_file())


def _groups_file() -> Path:
    assert _session_data_dir is not None, "pytest_configure made the data dir"
    return _session_data_dir / "xdist-groups.json"


# -- the suite's budget: printed at the end of every run (scripts/test, CI) ---------------------

SLOWEST_SHOWN = 15
_tier_seconds: dict[str, float] = {}
_tier_counts: dict[str, int] = {}
_test_seconds: dict[str, float] = {}
_started = time.monotonic()


def _tier_of(report: pytest.TestReport) -> str:
    return next((tier for tier in TIERS if tier in report.keywords), "none")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Add each phase's duration to its test and its test's tier. Under xdist this runs in the
    controller for every worker's report (the sums are the whole run's) and in each worker for
    its own (never printed there)."""
    # xdist's `@group` suffix off the node id, before the junit XML, the summary and
    # --durations see it: what is printed is what a user types to run the test again.
    report.nodeid = without_group(report.nodeid)
    tier = _tier_of(report)
    _tier_seconds[tier] = _tier_seconds.get(tier, 0.0) + report.duration
    _test_seconds[report.nodeid] = _test_seconds.get(report.nodeid, 0.0) + report.duration
    if report.when == "call" or (report.when == "setup" and report.skipped):
        _tier_counts[tier] = _tier_counts.get(tier, 0) + 1


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The slowest tests and the test time per tier (setup, call and teardown summed), once per
    run: by the controller under xdist, where the sums exceed the wall time."""
    config = terminalreporter.config
    if not _tier_seconds or hasattr(config, "workerinput"):
        return
    terminalreporter.section(f"slowest {SLOWEST_SHOWN} tests (setup + call + teardown)")
    slowest = sorted(_test_seconds.items(), key=lambda entry: -entry[1])[:SLOWEST_SHOWN]
    for nodeid, seconds in slowest:
        terminalreporter.write_line(f"{seconds:9.1f} s  {nodeid}")
    terminalreporter.section("time per tier")
    for tier in sorted(_tier_seconds, key=lambda t: -_tier_seconds[t]):
        count = _tier_counts.get(tier, 0)
        seconds = _tier_seconds[tier]
        terminalreporter.write_line(f"{tier:<12} {count:>5} tests {seconds:>9.1f} s")
    count, total = sum(_tier_counts.values()), sum(_tier_seconds.values())
    terminalreporter.write_line(f"{'all':<12} {count:>5} tests {total:>9.1f} s")
    workers = getattr(config.option, "numprocesses", None)  # xdist's -n, resolved to a count
    where = f"on {workers} workers" if workers else "in one process"
    wall = time.monotonic() - _started
    terminalreporter.write_line(f"{'wall':<12} {'':>11} {wall:>9.1f} s {where}")
