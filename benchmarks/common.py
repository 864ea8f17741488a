"""Shared helpers for benchmarks: percentiles, argument parsing, printing."""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence


def percentile(samples: Sequence[float], fraction: float) -> float:
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


def summary(name: str, samples_ms: Sequence[float]) -> str:
    p50, p99 = percentile(samples_ms, 0.5), percentile(samples_ms, 0.99)
    mean = statistics.fmean(samples_ms)
    return f"{name}: p50 {p50:.3f} ms  p99 {p99:.3f} ms  mean {mean:.3f} ms  n={len(samples_ms)}"


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="a short smoke run (for the test suite)")
    return p
