"""A desktop's orphan guard: stops the desktop when its relay has been gone too long.

Every desktop (when ``orphan_timeout_s`` > 0) has one small guard process in its process set,
started before any other child. The live relay touches ``<state_dir>/heartbeat`` every
watchdog round; when the file has not changed for ``--timeout`` seconds, the guard reads the
desktop's record from the state file, stops the process groups it names that are still the
recorded ones (start times compared, as re-adoption does), removes the desktop's private
directory and its sound server's runtime directory, and exits. A relay that comes back in time
re-adopts the desktop, guard included, and its heartbeat keeps the guard waiting.

Run as ``python -m relay.desktops.guard``; it loads only ``relay.desktops.process`` and
``relay.desktops.cgroups``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from relay.desktops import cgroups
from relay.desktops.process import DesktopProcesses, adopt_children

logger = logging.getLogger("relaydesk.guard")

STOP_GRACE_S = 3.0
_MAX_POLL_S = 5.0
_MIN_POLL_S = 0.2


@dataclass(frozen=True)
class GuardArgs:
    """What one guard watches and what it removes."""

    desktop_session_id: str
    state_file: Path
    heartbeat: Path
    timeout_s: float
    private_dir: Path
    pulse_root: Path | None
    cgroup: Path | None = None
    tmp_dir: Path | None = None

    @property
    def poll_s(self) -> float:
        return max(_MIN_POLL_S, min(self.timeout_s / 6, _MAX_POLL_S))

    def argv(self) -> list[str]:
        """Command-line arguments that rebuild these settings in the guard process."""
        args = [
            "--session",
            self.desktop_session_id,
            "--state-file",
            str(self.state_file),
            "--heartbeat",
            str(self.heartbeat),
            "--timeout",
            repr(self.timeout_s),
            "--private-dir",
            str(self.private_dir),
        ]
        args += ["--pulse-root", str(self.pulse_root)] if self.pulse_root else []
        args += ["--cgroup", str(self.cgroup)] if self.cgroup else []
        return args + (["--tmp-dir", str(self.tmp_dir)] if self.tmp_dir else [])


def parse_args(argv: list[str] | None = None) -> GuardArgs:
    parser = argparse.ArgumentParser(prog="relaydesk-desktop-guard")
    parser.add_argument("--session", required=True)
    parser.add_argument("--state-file", required=True, type=Path)
    parser.add_argument("--heartbeat", required=True, type=Path)
    parser.add_argument("--timeout", required=True, type=float)
    parser.add_argument("--private-dir", required=True, type=Path)
    parser.add_argument("--pulse-root", type=Path, default=None)
    parser.add_argument("--cgroup", type=Path, default=None)
    parser.add_argument("--tmp-dir", type=Path, default=None)
    ns = parser.parse_args(argv)
    return GuardArgs(
        ns.session,
        ns.state_file,
        ns.heartbeat,
        ns.timeout,
        ns.private_dir,
        ns.pulse_root,
        ns.cgroup,
        ns.tmp_dir,
    )


def heartbeat_age(heartbeat: Path, since: float) -> float:
    """Seconds since the relay last beat (never more than since ``since``, the guard's start)."""
    try:
        beat = heartbeat.stat().st_mtime
    except OSError:
        beat = since
    return time.time() - max(beat, since)


def find_record(state_file: Path, desktop_session_id: str) -> dict[str, Any] | None:
    """The desktop's record (complete or still starting), or None when no relay records it."""
    try:
        data = json.loads(state_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    for key in ("desktops", "starting"):
        for record in data.get(key) or ():
            if isinstance(record, dict) and record.get("desktop_session_id") == desktop_session_id:
                return record
    return None


async def stop_recorded(record: dict[str, Any], grace_s: float = STOP_GRACE_S) -> bool:
    """Stop the record's process groups that are still its own, except this guard's."""
    children = [c for c in adopt_children(record["processes"]) if c.pid != os.getpid()]
    return await DesktopProcesses(children).stop(grace_s)


def remove_dirs(args: GuardArgs, record: dict[str, Any]) -> None:
    shutil.rmtree(args.private_dir, ignore_errors=True)
    display = record.get("display")
    if args.pulse_root is not None and isinstance(display, int):
        shutil.rmtree(args.pulse_root / f"display-{display}", ignore_errors=True)


async def _until_orphaned(args: GuardArgs) -> None:
    """Return once the heartbeat is older than ``timeout_s`` (polled: it is a file's mtime)."""
    started = time.time()
    while True:
        remaining = args.timeout_s - heartbeat_age(args.heartbeat, started)
        if remaining <= 0:
            return
        await asyncio.sleep(min(args.poll_s, remaining))


async def watch(args: GuardArgs) -> str:
    """Wait until the relay is gone for ``timeout_s``, then stop the desktop; returns why it
    ended (``orphaned``, ``unrecorded``)."""
    await _until_orphaned(args)
    record = find_record(args.state_file, args.desktop_session_id)
    if record is None:
        return "unrecorded"
    # The directories go first, while the desktop still holds its display number: once its
    # X server is gone another desktop may take the number and its sound directory.
    remove_dirs(args, record)
    try:
        await stop_recorded(record)
    except (KeyError, TypeError, ValueError) as err:
        logger.warning("desktop record unusable: %s", type(err).__name__)
    if args.cgroup is not None:
        # What left the desktop's process groups (a program that called setsid) dies too.
        cgroups.kill(args.cgroup)
        cgroups.remove_if_empty(args.cgroup.parent)
    if args.tmp_dir is not None:
        shutil.rmtree(args.tmp_dir, ignore_errors=True)
    return "orphaned"


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
    # The relay stops a desktop's groups with SIGTERM; a guard has nothing to finish.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    args = parse_args(argv)
    outcome = asyncio.run(watch(args))
    if outcome == "orphaned":
        logger.warning(
            "desktop %s stopped: no relay heartbeat for %.0f s",
            args.desktop_session_id,
            args.timeout_s,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
