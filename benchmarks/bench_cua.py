"""Cua's own client against relaydesk and against Cua's own server, one run, one desktop.

A server, a real relay and one real desktop (1280x800). Cua's client (``cua-computer`` from
.venv-cua, which scripts/install builds) runs twice, each in its own process:

- (a) pointed at Cua's real ``computer_server`` started on the same desktop's display — the
  baseline: the client talks straight to a server on the desktop's host;
- (b) pointed at relaydesk's Cua endpoint (client → server → relay → desktop), every click
  guarded by the session's last screenshot, as a Cua session always is.

Interleaved rounds; each round takes screenshots (PNG) and clicks (each after a screenshot,
timed alone) both ways, alternating which goes first. Times are measured inside Cua's client
process around the interface call (its own HTTP stack, a new connection per command, as it
works). Printed: p50/p99 each way and the median per-round ratios (b)/(a); targets: screenshot
<= 0.5x, guarded click <= 2x.

Run: ``python -m benchmarks.bench_cua [--quick]``.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
from pathlib import Path

from benchmarks.common import parser, percentile, summary
from tests.support.a11y_stack import a11y_stack
from tests.support.cua import CuaClient, CuaServer

TARGETS = {"screenshot": 0.5, "click": 2.0}
POINT = (40, 40)  # the bare desktop's corner: a click there changes nothing on the screen


async def _timed(client: CuaClient, method: str, *args: object) -> float:
    record = await client.request(method, *args)
    if not record["ok"]:
        raise RuntimeError(f"{method}: {record['error']}\n{client.log[-2000:]}")
    return float(record["seconds"]) * 1000


async def _round(
    clients: dict[str, CuaClient], per_round: int, flip: bool
) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {f"{w}_{m}": [] for w in clients for m in TARGETS}
    order = list(clients)
    for index in range(per_round):
        ways = order if (index % 2 == 0) != flip else order[::-1]
        for way in ways:
            client = clients[way]
            samples[f"{way}_screenshot"].append(await _timed(client, "screenshot"))
            samples[f"{way}_click"].append(await _timed(client, "left_click", *POINT))
    return samples


async def run(quick: bool) -> None:
    rounds, per_round = (1, 3) if quick else (7, 20)
    root = Path(tempfile.mkdtemp(prefix="bench-cua-"))
    async with a11y_stack(root, []) as stack:
        base = (
            f"{stack.url}/api/v1/conversations/{stack.seed.conversation_id}"
            "/cua/relay-1/virtual/main"
        )
        oracle = await asyncio.to_thread(CuaServer, stack.display, str(stack.seed.relay_authority))
        clients: dict[str, CuaClient] = {}
        try:
            clients["cua"] = await CuaClient.start(oracle.url, "")
            clients["relaydesk"] = await CuaClient.start(base, stack.seed.api_token)
            await _round(clients, 2, False)  # warm-up: connections, caches, encoders
            results = [await _round(clients, per_round, r % 2 == 1) for r in range(rounds)]
        finally:
            for client in clients.values():
                client.close()
            oracle.stop()
    print(
        f"bench_cua: {rounds} interleaved rounds x {per_round} screenshots and guarded clicks "
        "each way, Cua's client (cua-computer), a 1280x800 desktop"
    )
    for measure in TARGETS:
        for way, label in (("cua", "(a) Cua's computer_server"), ("relaydesk", "(b) relaydesk")):
            flat = [s for r in results for s in r[f"{way}_{measure}"]]
            print(summary(f"{measure} {label}", flat))
        ratios = [
            percentile(r[f"relaydesk_{measure}"], 0.5) / percentile(r[f"cua_{measure}"], 0.5)
            for r in results
        ]
        spread = f"{min(ratios):.2f}-{max(ratios):.2f}"
        print(
            f"ratio {measure} (b)/(a) p50: {statistics.median(ratios):.2f}x, per round "
            f"{spread} (target <= {TARGETS[measure]}x)"
        )


def main() -> None:
    args = parser(__doc__ or "").parse_args()
    asyncio.run(run(args.quick))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
