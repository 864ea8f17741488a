"""MCP's screenshot tool call against the typed action it runs, one run, one desktop.

A server, a real relay and one real desktop (the tests' GTK form on it). Interleaved rounds,
each taking a PNG screenshot of the same desktop three ways:

- (a) the typed action: ``POST /api/v1/actions/screen`` — the baseline;
- (b) MCP: ``tools/call screen`` as one JSON-RPC POST to the conversation's Streamable HTTP
  endpoint, as the official SDK's client sends it (protocol 2026-07-28: the version in the
  request's ``_meta`` and headers), through the same minimal HTTP client as (a), so the
  difference is the server's MCP path (admission, the SDK, the image moved into image content);
- (b') the same call as a 2025-11-25 client sends it (no per-request envelope: the SDK serves
  it through its stateless transport);
- (c) the official MCP SDK's client doing the call (its own HTTP stack and parsing), for
  information: what an agent using the SDK sees.

Printed: p50/p99 of each, and the median per-round ratios against (a) (target for (b) and
(b'): <= 1.2x).

Run: ``python -m benchmarks.bench_mcp [--quick]``. Needs Xvfb, x11vnc, websockify and GTK's
python3-gi (scripts/install installs them).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from benchmarks.common import HttpClient, parser, percentile, summary
from tests.support.a11y_stack import FORM, A11yStack, a11y_stack
from tests.support.processes import scaled
from tests.support.stack import wait_until

SCREENSHOT: dict[str, Any] = {"action": "screenshot"}
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}
MODERN = "2026-07-28"
MODERN_HEADERS = {"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call", "Mcp-Name": "screen"}
MODERN_META = {types.PROTOCOL_VERSION_META_KEY: MODERN, types.CLIENT_CAPABILITIES_META_KEY: {}}
TARGET = 1.2
LABELS = {
    "typed": "(a) typed action  POST /api/v1/actions/screen",
    "mcp": f"(b) MCP tools/call screen, {MODERN} (same HTTP client)",
    "mcp_2025": "(b') MCP tools/call screen, 2025-11-25 (same HTTP client)",
    "sdk": "(c) MCP tools/call screen (official SDK client)",
}


class Ways:
    """The ways to take the screenshot, each timed in milliseconds."""

    def __init__(self, stack: A11yStack, sdk: Client) -> None:
        auth = {"Authorization": f"Bearer {stack.seed.api_token}"}
        self.conversation_id = stack.seed.conversation_id
        self.mcp_path = f"/api/v1/conversations/{self.conversation_id}/mcp"
        self.actions = HttpClient(stack.url, auth)
        self.mcp = HttpClient(stack.url, {**auth, **MCP_HEADERS, **MODERN_HEADERS})
        self.mcp_2025 = HttpClient(stack.url, {**auth, **MCP_HEADERS})
        self.sdk = sdk
        self.calls = 0

    async def typed_action(self) -> None:
        body = {"conversation_id": self.conversation_id, **SCREENSHOT}
        status, answer = await self.actions.post_json("/api/v1/actions/screen", body)
        if status != 200 or not answer.get("image"):
            raise RuntimeError(f"typed action: {status} {str(answer)[:200]}")

    async def mcp_call(self) -> None:
        await self._tools_call(self.mcp, {"_meta": MODERN_META})

    async def mcp_2025_call(self) -> None:
        await self._tools_call(self.mcp_2025, {})

    async def _tools_call(self, client: HttpClient, extra: dict[str, Any]) -> None:
        self.calls += 1
        request = {
            "jsonrpc": "2.0",
            "id": self.calls,
            "method": "tools/call",
            "params": {"name": "screen", "arguments": SCREENSHOT, **extra},
        }
        status, answer = await client.post_json(self.mcp_path, request)
        result = answer.get("result") or {}
        kinds = [c.get("type") for c in result.get("content", [])]
        if status != 200 or result.get("isError") or "image" not in kinds:
            raise RuntimeError(f"MCP call: {status} {str(answer)[:200]}")

    async def sdk_call(self) -> None:
        result = await self.sdk.call_tool("screen", SCREENSHOT)
        if result.is_error or not any(isinstance(c, types.ImageContent) for c in result.content):
            raise RuntimeError(f"SDK call: {result.content[:1]}")

    async def close(self) -> None:
        await self.actions.close()
        await self.mcp.close()
        await self.mcp_2025.close()


async def _timed(call: Callable[[], Awaitable[None]]) -> float:
    started = time.perf_counter()
    await call()
    return (time.perf_counter() - started) * 1000


async def measure(ways: Ways, rounds: int, per_round: int) -> dict[str, list[list[float]]]:
    """``name → rounds → samples``; within a round the ways alternate call by call."""
    calls = {
        "typed": ways.typed_action,
        "mcp": ways.mcp_call,
        "mcp_2025": ways.mcp_2025_call,
        "sdk": ways.sdk_call,
    }
    samples: dict[str, list[list[float]]] = {name: [] for name in calls}
    order = list(calls)
    for _ in range(rounds):
        for name in calls:
            samples[name].append([])
        for _ in range(per_round):
            order = order[1:] + order[:1]  # no way always goes first
            for name in order:
                samples[name][-1].append(await _timed(calls[name]))
    return samples


def report(samples: dict[str, list[list[float]]]) -> None:
    flat = {name: [s for r in rounds for s in r] for name, rounds in samples.items()}
    for name, label in LABELS.items():
        print(summary(label, flat[name]))
    for name in ("mcp", "mcp_2025", "sdk"):
        label = LABELS[name].split()[0] + "/(a)"
        per_round = [
            percentile(way, 0.5) / percentile(base, 0.5)
            for way, base in zip(samples[name], samples["typed"], strict=True)
        ]
        ratio = statistics.median(per_round)
        verdict = " (for information)" if name == "sdk" else f" (target <= {TARGET}x)"
        print(
            f"ratio {label} p50: {ratio:.2f}x, per round {min(per_round):.2f}-"
            f"{max(per_round):.2f}{verdict}"
        )


async def run(quick: bool) -> None:
    rounds, per_round = (1, 3) if quick else (7, 30)
    root = Path(tempfile.mkdtemp(prefix="bench-mcp-"))
    async with a11y_stack(root, [FORM]) as stack:
        await wait_until(lambda: stack.state() != {}, scaled(30), "the form to start")
        endpoint = f"{stack.url}/api/v1/conversations/{stack.seed.conversation_id}/mcp"
        headers = {"Authorization": f"Bearer {stack.seed.api_token}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=scaled(60)) as http,
            Client(streamable_http_client(endpoint, http_client=http)) as sdk,
        ):
            ways = Ways(stack, sdk)
            try:
                await measure(ways, 1, 3)  # warm-up: connections, caches, the desktop's encoder
                samples = await measure(ways, rounds, per_round)
            finally:
                await ways.close()
    print(
        f"bench_mcp: {rounds} interleaved rounds x {per_round} calls each way, "
        "PNG screenshot of a 1280x800 desktop"
    )
    report(samples)


def main() -> None:
    args = parser(__doc__ or "").parse_args()
    asyncio.run(run(args.quick))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
