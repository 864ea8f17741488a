"""Desktops in containers (``kind: docker``): start → ready, against a virtual desktop's.

Interleaved in one run, the same minimal session (openbox and xterm, no sound):

* ``docker``: a start by the ``ContainerLauncher`` (directory, display claim, container create
  and start, until x11vnc greets through its unix socket) and the removal that ``stop`` does;
* ``virtual``: a start by the ``ProcessLauncher`` (until the RFB banner comes through
  websockify) and its stop: the baseline.

Also the desktop image's size and its memory in use per idle desktop (the container's cgroup).
Needs a Docker daemon with ``relaydesk/desktop:dev`` (``scripts/docker-build desktop``) and the
virtual desktops' programs. Run: ``.venv/bin/python -m benchmarks.bench_docker_desktops
[--quick]``.
"""

from __future__ import annotations

import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from benchmarks.common import parser, percentile
from relay.desktops import DesktopSettings, process_desktops
from relay.desktops.docker.config import DockerDesktopSettings
from relay.desktops.docker.launcher import ContainerLauncher
from wire.ops import RelayRow

Row = RelayRow


async def timed_start_stop(
    start: Callable[[], Awaitable[Row]], stop: Callable[[Row], Awaitable[None]]
) -> tuple[float, float]:
    """Seconds for one start and for its stop."""
    began = time.monotonic()
    row = await start()
    started = time.monotonic() - began
    began = time.monotonic()
    await stop(row)
    return started, time.monotonic() - began


async def run(rounds: int, settle_s: float) -> None:
    state = Path(tempfile.mkdtemp(prefix="bench-docker-desktops-"))
    config = DesktopSettings.from_env(state_dir=state, default_profile="minimal")
    virtual = process_desktops(config)
    virtual.authority.use_in_process()
    containers = ContainerLauncher(
        config, DockerDesktopSettings.from_env(), authority=virtual.authority
    )
    docker = containers.lifecycle()
    if reason := await containers.probe():
        sys.exit(f"no docker desktops here: {reason}")
    await docker.adopt()
    engine = containers.engine
    assert engine is not None
    samples: dict[str, list[tuple[float, float]]] = {"docker": [], "virtual": []}

    async def start_docker() -> Row:
        return await docker.start(slot="bench", audio=False)

    async def stop_docker(row: Row) -> None:
        await docker.stop(slot="bench", desktop_session_id=str(row["desktop_session_id"]))

    async def start_virtual() -> Row:
        return await virtual.start(slot="bench", audio=False, profile="minimal")

    async def stop_virtual(row: Row) -> None:
        await virtual.stop(
            kind="virtual", slot="bench", desktop_session_id=str(row["desktop_session_id"])
        )

    try:
        for _ in range(rounds):
            samples["docker"].append(await timed_start_stop(start_docker, stop_docker))
            samples["virtual"].append(await timed_start_stop(start_virtual, stop_virtual))
        row = await start_docker()
        await asyncio.sleep(settle_s)  # idle: the session's programs have settled
        desktop = docker.live(str(row["desktop_session_id"]))
        assert desktop is not None
        stats = await engine.stats(desktop.container_id)
        memory = float(stats["memory_stats"]["usage"]) / 1e6
        await stop_docker(row)
        image = await engine.image(containers.settings.image) or {"Size": 0}
    finally:
        await docker.close(stop_desktops=True)
        await virtual.close(stop_desktops=True)
        shutil.rmtree(state, ignore_errors=True)
    report(samples, float(image["Size"]) / 1e6, memory, containers.settings.image)


def report(
    samples: dict[str, list[tuple[float, float]]], image_mb: float, memory_mb: float, image: str
) -> None:
    for kind, pairs in samples.items():
        starts, stops = [p[0] for p in pairs], [p[1] for p in pairs]
        print(
            f"{kind:8s} start → ready: p50 {statistics.median(starts):.2f} s  "
            f"min {min(starts):.2f}  max {max(starts):.2f}  "
            f"p90 {percentile(starts, 0.9):.2f}  n={len(starts)}; "
            f"stop p50 {statistics.median(stops):.2f} s"
        )
    ratio = statistics.median(p[0] for p in samples["docker"]) / statistics.median(
        p[0] for p in samples["virtual"]
    )
    print(f"docker / virtual start p50: {ratio:.2f}x")
    print(f"{image}: {image_mb:.0f} MB; an idle docker desktop uses {memory_mb:.0f} MB")


def main() -> None:
    args = parser(__doc__ or "").parse_args()
    asyncio.run(run(1, 1.0) if args.quick else run(10, 3.0))


if __name__ == "__main__":
    main()
