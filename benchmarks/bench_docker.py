"""relaydesk's images: their sizes, and how soon a relay container gives its first desktop.

* image sizes (uncompressed, as `docker images` shows them) against the targets: server
  <= 250 MB, relay <= 900 MB (without the browser);
* server container start → `/readyz` answers 200 (SQLite in a fresh volume, migrations run);
* relay container start → first desktop ready: `docker run` of the relay image until a
  `desktop_start` through the server's HTTP API has answered with a running desktop (the
  relay dials, says hello, starts Xvfb, x11vnc, websockify, openbox and a terminal and probes
  the chain), p50 over 5 runs (target <= 3 s), split into "connected" and "desktop start".

Containers use host networking on a free loopback port; each relay run is stopped with
`docker stop` (its desktops stop with it) and removed.

Run: ``.venv/bin/python benchmarks/bench_docker.py [--quick] [--no-build]``.
"""

from __future__ import annotations

import statistics
import time

from benchmarks.common import parser, percentile
from tests.support.docker import (
    FIRST_DESKTOP_TARGET_S,
    RELAY_IMAGE,
    RELAY_IMAGE_TARGET_MB,
    SERVER_IMAGE,
    SERVER_IMAGE_TARGET_MB,
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


def relay_to_first_desktop(server: ServerContainer, seed: Seed) -> tuple[float, float]:
    """Seconds from `docker run` of a relay to its server connection, and to a running desktop."""
    started = time.monotonic()
    relay = run_container(RELAY_IMAGE, "bench-relay", relay_env(server, seed.relay_token))
    try:
        server.wait_relays(1, timeout=30)
        connected = time.monotonic() - started
        body = {"conversation_id": seed.conversation_id}
        status, answer = api_action(server.url, seed.api_token, "desktop_start", body)
        ready = time.monotonic() - started
        if status != 200 or answer["desktop"]["state"] != "running":
            raise RuntimeError(f"desktop_start answered {status}: {answer}\n{relay.logs()}")
        relay.stop()
        return connected, ready
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


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("--no-build", action="store_true", help="use the images as they are")
    p.add_argument("--runs", type=int, default=5, help="relay container starts to time")
    args = p.parse_args()
    runs = 1 if args.quick else args.runs
    require_docker()
    if not args.no_build:
        print(f"scripts/docker-build: {build_images():.1f} s")
    report_sizes()

    with server_on_new_volume() as server:
        started = time.monotonic()
        server.start()
        server.wait_ready()
        print(f"server container start → /readyz 200: {time.monotonic() - started:.2f} s")
        seed = server.seed("bench-relay")
        connected, ready = [], []
        for _ in range(runs):
            c, r = relay_to_first_desktop(server, seed)
            connected.append(c)
            ready.append(r)
            wait_disconnected(server)

    p50_ready, p50_connected = percentile(ready, 0.5), percentile(connected, 0.5)
    print(
        f"relay container start → connected: p50 {p50_connected:.2f} s  "
        f"(min {min(connected):.2f}, max {max(connected):.2f})  n={runs}"
    )
    print(
        f"relay container start → first desktop ready: p50 {p50_ready:.2f} s  "
        f"(min {min(ready):.2f}, max {max(ready):.2f}, mean {statistics.fmean(ready):.2f})  "
        f"n={runs}  target {FIRST_DESKTOP_TARGET_S:.1f} s  "
        f"ratio {p50_ready / FIRST_DESKTOP_TARGET_S:.2f}"
    )


if __name__ == "__main__":
    main()
