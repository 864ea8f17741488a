"""The state of one soak run (``benchmarks/bench_soak.py``): the processes it started, what it
left on the machine, its samples, errors and recoveries. Shared by the run, its report
(``soak_report.py``) and its leftover check (``soak_leftovers.py``)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from server.events.bus import HISTORY_LENGTH
from tests.support.processes import ManagedProcess
from tests.support.stack import FAST_ENV, Seed


@dataclass
class Footprint:
    """What belongs to this run: pids (with their start times) and the X displays it used."""

    pids: dict[int, float] = field(default_factory=dict)
    names: dict[int, str] = field(default_factory=dict)  # pid → process or record name
    x_sockets: set[tuple[int, int, int]] = field(default_factory=set)  # display, inode, mtime

    @property
    def displays(self) -> list[int]:
        return sorted({display for display, _, _ in self.x_sockets})

    def add_live(self, pid: int) -> None:
        if pid not in self.pids:
            with contextlib.suppress(psutil.Error):
                proc = psutil.Process(pid)
                self.pids[pid] = proc.create_time()
                self.names.setdefault(pid, proc.name())


@dataclass
class Failure:
    began: float
    ended: float
    what: str


@dataclass
class Soak:
    seed: Seed
    root: Path
    port: int
    trace: tuple[Path, float] | None = None
    log_level: str = "warning"
    server: ManagedProcess | None = None
    relay: ManagedProcess | None = None
    born: dict[int, float] = field(default_factory=dict)  # pid → monotonic start
    history_full: dict[int, float] = field(default_factory=dict)  # server pid → monotonic
    # The conversation's event ids each server incarnation sent (the subscribers share them).
    topic_events: dict[int, set[str]] = field(default_factory=dict)
    samples: list[dict[str, float]] = field(default_factory=list)
    errors: list[Failure] = field(default_factory=list)
    windows: list[tuple[float, float]] = field(default_factory=list)  # kill windows
    recovery: dict[str, list[float]] = field(default_factory=dict)
    footprint: Footprint = field(default_factory=Footprint)
    main_session: str = ""
    started: float = field(default_factory=time.monotonic)
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def state_dir(self) -> Path:
        return self.seed.data_dir / "relay-state"

    @property
    def tmp_dir(self) -> Path:
        """The processes' TMPDIR: what they make there (sound runtime dirs) is this run's."""
        return self.root / "tmp"

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            **self.seed.env(),
            **FAST_ENV,
            "RELAYDESK_LOG_LEVEL": self.log_level,
            "TMPDIR": str(self.tmp_dir),
        }

    def now(self) -> float:
        return time.monotonic() - self.started

    def error(self, began: float, what: str) -> None:
        self.errors.append(Failure(began, self.now(), what))

    def saw_event(self, event_id: str) -> None:
        """Note when the server's event history of this conversation is full: HISTORY_LENGTH
        events of its own topic (an id's sequence counts every topic's events, so it reaches
        that number long before)."""
        if self.server is None or not event_id:
            return
        seen = self.topic_events.setdefault(self.server.pid, set())
        seen.add(event_id)
        if len(seen) >= HISTORY_LENGTH:
            self.history_full.setdefault(self.server.pid, time.monotonic())
