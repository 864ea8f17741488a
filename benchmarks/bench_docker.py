"""relaydesk's images: their sizes, and how soon a relay container gives its first desktop.

* image sizes (uncompressed, as `docker images` shows them) against the targets: server
  <= 250 MB, relay <= 900 MB (without the browser);
* server container start → `/readyz` answers 200 (SQLite in a fresh volume, migrations run);
* relay container start → first desktop ready: `docker run` of the relay image until a
  `desktop_start` through the server's HTTP API has answered with a running desktop (the
  relay dials, says hello, starts Xvfb, x11vnc, websockify, openbox and a terminal and probes
  the chain), p50 over 5 runs (target <= 3 s), split where the time goes: Docker starting the
  container's process, the relay's interpreter and imports (until it logs "relay starting"),
  its connection (until the server counts it), and the desktop's start (the API's answer).

`--baseline IMAGE` (repeatable) times other relay images in the same run, interleaved (A B B A
…) so that load from other work hits them alike: a before/after comparison of a change.

Containers use host networking on a free loopback port; each relay run is stopped with
`docker stop` (its desktops stop with it) and removed.

Run: ``.venv/bin/python benchmarks/bench_docker.py [--quick] [--no-build] [--baseline IMAGE]``.
"""

from __future__ import annotations

import datetime
import json
import statistics
import time
from dataclasses import dataclass, fields

from benchmarks.common import parser, percentile
from tests.support.docker import (
    FIRST_DESKTOP_TARGET_S,
    RELAY_IMAGE,
    RELAY_IMAGE_TARGET_MB,
    SERVER_IMAGE,
    SERVER_IMAGE_TARGET_MB,
    Container,
    Seed,
    ServerContainer,
    api_action,
    build_images,
    image_size_mb,
    relay_env,
    require_docker,
    run_container,
    server_on_new_volume,
)

# What the relay logs once its imports are done and it begins to start (relay/service.py).
STARTING_MESSAGE = "relay starting"


@dataclass
class RelayStart:
    """One relay container's start: seconds from `docker run` to each step."""

    process: float  # Docker started the container's process
    relay_up: float  # the relay logged "relay starting": interpreter and imports done
    connected: float  # the server counts the relay as connected
    ready: float  # desktop_start answered with a running desktop


def _wall(stamp: str) -> float:
    """A Docker or relay log timestamp (ISO 8601, UTC) as seconds since the epoch."""
    return datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _relay_up(relay: Container) -> float:
    """Wall time of the relay's "relay starting" line (its logs are JSON, one object a line)."""
    for line in relay.logs().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("msg") == STARTING_MESSAGE:
            return _wall(str(entry["ts"]))
    raise RuntimeError(f"the relay never logged {STARTING_MESSAGE!r}:\n{relay.logs()}")


def relay_to_first_desktop(server: ServerContainer, seed: Seed, image: str) -> RelayStart:
    """`docker run` of a relay image until its first desktop runs, step by step."""
    env = {**relay_env(server, seed.relay_token), "RELAYDESK_LOG_FORMAT": "json"}
    began_wall, began = time.time(), time.monotonic()
    relay = run_container(image, "bench-relay", env)
    try:
        server.wait_relays(1, timeout=30)
        connected = time.monotonic() - began
        body = {"conversation_id": seed.conversation_id}
        status, answer = api_action(server.url, seed.api_token, "desktop_start", body)
        ready = time.monotonic() - began
        if status != 200 or answer["desktop"]["state"] != "running":
            raise RuntimeError(f"desktop_start answered {status}: {answer}\n{relay.logs()}")
        process = _wall(relay.inspect()["State"]["StartedAt"]) - began_wall
        relay_up = _relay_up(relay) - began_wall
        relay.stop()
        return RelayStart(process, relay_up, connected, ready)
    finally:
        relay.remove()


def wait_disconnected(server: ServerContainer) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        body = server.readyz()
        if body is not None and int(body["relays_connected"]) == 0:
            return
        time.sleep(0.05)
    raise RuntimeError("the stopped relay is still counted as connected")


def report_sizes() -> None:
    targets = ((SERVER_IMAGE, SERVER_IMAGE_TARGET_MB), (RELAY_IMAGE, RELAY_IMAGE_TARGET_MB))
    for image, target in targets:
        size = image_size_mb(image)
        print(f"{image}: {size:.0f} MB  target {target} MB  ratio {size / target:.2f}")


def report_starts(image: str, starts: list[RelayStart]) -> float:
    """Print one image's figures; return its p50 to the first desktop."""
    print(f"{image}, n={len(starts)}:")
    labels = {
        "process": "relay container start → its process runs",
        "relay_up": 'relay container start → relay imported ("relay starting")',
        "connected": "relay container start → connected",
    }
    for name, label in labels.items():
        values = [getattr(s, name) for s in starts]
        print(
            f"  {label}: p50 {percentile(values, 0.5):.2f} s  "
            f"(min {min(values):.2f}, max {max(values):.2f})"
        )
    desktop = [s.ready - s.connected for s in starts]
    print(f"  connected → desktop running (API answer): p50 {percentile(desktop, 0.5):.2f} s")
    ready = [s.ready for s in starts]
    p50 = percentile(ready, 0.5)
    print(
        f"  relay container start → first desktop ready: p50 {p50:.2f} s  "
        f"(min {min(ready):.2f}, max {max(ready):.2f}, mean {statistics.fmean(ready):.2f})  "
        f"target {FIRST_DESKTOP_TARGET_S:.1f} s  ratio {p50 / FIRST_DESKTOP_TARGET_S:.2f}"
    )
    return p50


def interleaved(images: list[str], runs: int) -> list[str]:
    """Each image ``runs`` times, in A B B A order, so drifting load hits them alike."""
    order: list[str] = []
    for round_ in range(runs):
        order += images if round_ % 2 == 0 else images[::-1]
    return order


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--no-build", action="store_true", help="use the images as they are")
    p.add_argument("--runs", type=int, default=5, help="relay container starts to time")
    p.add_argument(
        "--baseline",
        metavar="IMAGE",
        action="append",
        default=[],
        help="a relay image to compare with (repeatable)",
    )
    args = p.parse_args()
    runs = 1 if args.quick else args.runs
    if runs < 1:
        p.error("--runs must be at least 1")
    require_docker()
    if not args.no_build:
        print(f"scripts/docker-build: {build_images():.1f} s")
    report_sizes()
    images = [RELAY_IMAGE, *args.baseline]
    for image in images[1:]:
        image_size_mb(image)  # fails now, naming the image, when Docker does not have it

    starts: dict[str, list[RelayStart]] = {image: [] for image in images}
    with server_on_new_volume() as server:
        started = time.monotonic()
        server.start()
        server.wait_ready()
        print(f"server container start → /readyz 200: {time.monotonic() - started:.2f} s")
        seed = server.seed("bench-relay")
        for image in interleaved(images, runs):
            starts[image].append(relay_to_first_desktop(server, seed, image))
            wait_disconnected(server)

    p50s = [report_starts(image, starts[image]) for image in images]
    for baseline, p50 in zip(images[1:], p50s[1:], strict=True):
        print(f"first desktop p50: {images[0]} / {baseline} ratio {p50s[0] / p50:.2f}")
        for name in (f.name for f in fields(RelayStart)):
            ours, theirs = (
                percentile([getattr(s, name) for s in starts[i]], 0.5)
                for i in (images[0], baseline)
            )
            print(f"  {name}: {ours:.2f} s vs {theirs:.2f} s")


if __name__ == "__main__":
    main()
