"""The soak benchmark's analysis and report: slopes per process incarnation after warm-up,
verdicts against the targets (``benchmarks/bench_soak.py`` runs the workload)."""

from __future__ import annotations

import asyncio
import contextlib
import math
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import psutil

from server.events.bus import HISTORY_LENGTH

TARGET_RSS_SLOPE_MB = 0.05
TARGET_API_S = 3.0
TARGET_VIEWER_S = 5.0
# A slope is judged against its target only over this much post-warm-up time.
MIN_JUDGED_S = 300.0
METRICS = ("rss_mb", "fds", "threads", "children")
COUNT_GAIN = 2  # a count that rose this much over a segment, by trend and by floor, leaks

if TYPE_CHECKING:
    from benchmarks.soak_run import Failure, Soak
    from tests.support.processes import ManagedProcess

# -- sampling -----------------------------------------------------------------------------------


def measure(process: ManagedProcess | None, prefix: str) -> dict[str, float]:
    if process is None or not process.is_alive():
        return {}
    try:
        proc = psutil.Process(process.pid)
        with proc.oneshot():
            return {
                f"{prefix}_pid": float(process.pid),
                f"{prefix}_rss_mb": proc.memory_info().rss / 2**20,
                f"{prefix}_fds": float(proc.num_fds()),
                f"{prefix}_threads": float(proc.num_threads()),
                f"{prefix}_children": float(len(proc.children(recursive=True))),
            }
    except psutil.Error:
        return {}


async def sampler(soak: Soak, every_s: float) -> None:
    while not soak.stop.is_set():
        sample = {"t": soak.now(), **measure(soak.server, "server"), **measure(soak.relay, "relay")}
        soak.samples.append(sample)
        progress = "  ".join(f"{k}={v:.1f}" for k, v in sample.items() if not k.endswith("pid"))
        print(f"sample {progress} errors={len(soak.errors)}", file=sys.stderr, flush=True)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(soak.stop.wait(), every_s)


def slope(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of ``(minute, value)`` points, per minute."""
    return pooled_slope([points])


def pooled_slope(segments: list[list[tuple[float, float]]]) -> float | None:
    """One slope over several segments, each with its own intercept (deviations from its mean)."""
    sxx = sxy = 0.0
    for points in segments:
        if len(points) < 3:
            continue
        mx = sum(x for x, _ in points) / len(points)
        my = sum(y for _, y in points) / len(points)
        sxx += sum((x - mx) ** 2 for x, _ in points)
        sxy += sum((x - mx) * (y - my) for x, y in points)
    return sxy / sxx if sxx else None


@dataclass
class Segment:
    """One incarnation of a process: its samples after warm-up, in run minutes. Counts are fitted
    from ``counts_from``; memory from ``rss_from`` (later for the server: its event history)."""

    process: str
    pid: int
    born_s: float
    end_s: float
    samples: list[dict[str, float]]
    counts_from: float
    rss_from: float

    def points(self, metric: str) -> list[tuple[float, float]]:
        key = f"{self.process}_{metric}"
        after = self.rss_from if metric == "rss_mb" else self.counts_from
        return [(s["t"] / 60, s[key]) for s in self.samples if key in s and s["t"] >= after]

    def judged_s(self, metric: str) -> float:
        points = self.points(metric)
        return (points[-1][0] - points[0][0]) * 60 if len(points) > 1 else 0.0

    def span(self, metric: str) -> str:
        points = self.points(metric)
        if not points:
            return "still warming up"
        return f"{points[0][0]:.1f}-{points[-1][0]:.1f} min"


def segments(soak: Soak, process: str, warmup_s: float) -> list[Segment]:
    """The samples of ``process`` cut at each new pid, each with its warm-up times."""
    key, found = f"{process}_pid", []
    for pid in dict.fromkeys(int(s[key]) for s in soak.samples if key in s):
        mine = [s for s in soak.samples if s.get(key) == pid]
        born = soak.born[pid] - soak.started
        rss_from = warmed_up_at(soak, process, pid, warmup_s)
        found.append(Segment(process, pid, born, mine[-1]["t"], mine, born + warmup_s, rss_from))
    return found


def warmed_up_at(soak: Soak, process: str, pid: int, warmup_s: float) -> float:
    """Run time when an incarnation's warm-up ends: ``warmup_s`` after its start and, for the
    server, once its event history is full (never, when it does not fill)."""
    end = soak.born[pid] - soak.started + warmup_s
    if process == "server":
        full = soak.history_full.get(pid)
        end = max(end, full - soak.started if full is not None else math.inf)
    return end


# -- the report ---------------------------------------------------------------------------------


@dataclass
class Report:
    soak: Soak
    minutes: float
    warmup_s: float
    left: dict[str, list[str]]
    failed: list[str] = field(default_factory=list)

    def verdict(self, name: str, figure: str, ok: bool | None) -> None:
        """``verdict NAME: FIGURE ok|FAIL|not judged`` (the smoke test reads these lines)."""
        status = "not judged" if ok is None else "ok" if ok else "FAIL"
        if ok is False:
            self.failed.append(name)
        print(f"verdict {name}: {figure} {status}")

    def print(self) -> int:
        soak = self.soak
        print(
            f"soak: {self.minutes:g} min, {len(soak.samples)} samples; slopes per incarnation "
            f"after its warm-up: {self.warmup_s:.0f} s from its start and, for the server, "
            f"until its event history holds {HISTORY_LENGTH} events"
        )
        for process in ("server", "relay"):
            self.slopes(process)
        self.recoveries()
        self.errors()
        self.leftovers()
        return 1 if self.failed else 0

    def slopes(self, process: str) -> None:
        parts = segments(self.soak, process, self.warmup_s)
        for n, seg in enumerate(parts, 1):
            figures = "  ".join(_fmt(m, slope(seg.points(m))) for m in METRICS)
            gains = (f"{m} {floor_gain(seg.points(m)):+g}" for m in METRICS[1:] if seg.points(m))
            print(
                f"  {process} segment {n} (pid {seg.pid}, {seg.born_s / 60:.1f}-"
                f"{seg.end_s / 60:.1f} min; RSS fitted {seg.span('rss_mb')}, counts "
                f"{seg.span('fds')}): {figures}  (floor: {', '.join(gains)})"
            )
        for metric in METRICS:
            judged = [seg for seg in parts if seg.judged_s(metric) >= MIN_JUDGED_S]
            combined = pooled_slope([seg.points(metric) for seg in parts])
            self.verdict(
                f"{process} {metric} slope",
                f"{_fmt(metric, combined)} combined",
                _slope_ok(metric, judged) if judged else None,
            )

    def recoveries(self) -> None:
        soak = self.soak
        for name, times in soak.recovery.items():
            print(f"  recovery {name}: {', '.join(f'{t:.2f}' for t in times)} s")
        for kind, target in (("api", TARGET_API_S), ("viewer", TARGET_VIEWER_S)):
            worst = max(
                (t for k, v in soak.recovery.items() if k.endswith(kind) for t in v),
                default=float("inf"),
            )
            self.verdict(
                f"recovery {kind}", f"worst {worst:.2f} s (target <= {target:g})", worst <= target
            )
            print(f"worst {kind} recovery / target ratio: {worst / target:.2f}")
        # A recovery is recorded only once ``main`` answers with its original session id.
        kept = sum(1 for k in soak.recovery if k.endswith(" api"))
        self.verdict("session ids kept", f"{kept} of 2 kills", kept == 2)

    def errors(self) -> None:
        soak = self.soak
        stray = [e for e in soak.errors if not _overlaps(e, soak.windows)]
        print(
            f"  errors: {len(soak.errors) - len(stray)} in kill windows "
            f"{[(round(a), round(b)) for a, b in soak.windows]}"
        )
        for e in stray[:10]:
            print(f"    {e.began:.0f}-{e.ended:.0f} s: {e.what}")
        self.verdict("errors outside kill windows", str(len(stray)), not stray)

    def leftovers(self) -> None:
        for name, items in self.left.items():
            print(f"  leftovers {name}: {len(items)} {items[:5] if items else ''}")
        total = sum(len(items) for items in self.left.values())
        footprint = self.soak.footprint
        print(f"  scope: {len(footprint.pids)} pids, displays {footprint.displays}")
        processes = len(self.left.get("processes", []))
        self.verdict("leftover processes", str(processes), processes == 0)
        self.verdict("leftovers", str(total), total == 0)


def _fmt(metric: str, value: float | None) -> str:
    return f"{metric} {'n/a' if value is None else f'{value:+.3f}/min'}"


def _slope_ok(metric: str, judged: list[Segment]) -> bool:
    """RSS: every judged segment within the target. Counts: no judged segment gained two both
    by its trend and by its floor (connections and churn swing fds by ±3 around a floor that a
    15-minute segment need not touch in each third; a leak gains one per cycle, hundreds)."""
    if metric == "rss_mb":
        return all((slope(seg.points(metric)) or 0.0) <= TARGET_RSS_SLOPE_MB for seg in judged)
    return not any(_gained(seg, metric) for seg in judged)


def _gained(seg: Segment, metric: str) -> bool:
    trend = (slope(seg.points(metric)) or 0.0) * seg.judged_s(metric) / 60
    return trend >= COUNT_GAIN and floor_gain(seg.points(metric)) >= COUNT_GAIN


def floor_gain(points: list[tuple[float, float]]) -> float:
    """How far the lowest value rose from a segment's first third to its last third (counts
    swing with open connections and running desktops; a leak lifts the floor)."""
    third = max(1, len(points) // 3)
    return min(y for _, y in points[-third:]) - min(y for _, y in points[:third])


def _overlaps(error: Failure, windows: list[tuple[float, float]]) -> bool:
    return any(error.began <= b and error.ended >= a for a, b in windows)
