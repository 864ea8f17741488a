"""Playwright through relaydesk's CDP endpoint against Playwright on a direct CDP connection,
in one run.

The desktop's Chromium (started by the relay, DevTools on its private pipe) is reached through
the server's endpoint: WebSocket → server (checks, gate) → relay channel → the relay's pipe.
No one else can reach that browser directly, so the baseline is the same Chromium binary with
the same flags started by this benchmark on a loopback debugging port, reached by
``connect_over_cdp`` straight. Interleaved rounds of ``page.evaluate("1")`` on each (target:
relaydesk adds <= 1.5 ms p50), and of ``page.mouse.move`` (input: the control gate's cost).

Run: ``python -m benchmarks.bench_browser_cdp [--quick]``. Needs Xvfb, x11vnc, websockify and
Chromium (scripts/install installs them).
"""

from __future__ import annotations

import asyncio
import functools
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from playwright.async_api import Page, Playwright, async_playwright

from benchmarks.common import parser, percentile, summary, timed
from tests.support.browser_stack import browser_stack, page_server
from tests.support.processes import free_port, scaled


def _direct_browser(profile: Path, port: int, url: str) -> subprocess.Popen[bytes]:
    command = [
        shutil.which("chromium") or "chromium",
        "--headless=new",
        f"--remote-debugging-port={port}",
        "--remote-debugging-address=127.0.0.1",
        f"--user-data-dir={profile}",
        "--no-first-run",
        "--disable-gpu",
        *(["--no-sandbox"] if os.geteuid() == 0 else []),  # a root benchmark run
        url,
    ]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def _connected(playwright: Playwright, endpoint: str, headers: dict[str, str]) -> Page:
    deadline = time.monotonic() + scaled(60)
    while True:
        try:
            browser = await playwright.chromium.connect_over_cdp(endpoint, headers=headers)
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)
    pages = [p for c in browser.contexts for p in c.pages]
    return pages[0]


async def run(quick: bool) -> None:
    rounds = 50 if quick else 300
    with page_server() as base_url, tempfile.TemporaryDirectory() as root:
        async with browser_stack(
            Path(root) / "stack", base_url, env={"RELAYDESK_BROWSER_EVALUATE": "1"}
        ) as stack:
            port = free_port()
            direct = _direct_browser(Path(root) / "direct", port, f"{base_url}/form.html")
            try:
                async with async_playwright() as playwright:
                    cid = stack.seed.conversation_id
                    endpoint = (
                        f"{stack.url}/api/v1/conversations/{cid}/cdp/{stack.relay_id}/virtual/main"
                    )
                    auth = {"Authorization": f"Bearer {stack.seed.api_token}"}
                    through = await _connected(playwright, endpoint, auth)
                    straight = await _connected(playwright, f"http://127.0.0.1:{port}", {})
                    samples: dict[str, list[float]] = {
                        k: [] for k in ("rd", "direct", "rd_move", "direct_move")
                    }
                    for n in range(rounds + 10):
                        x = 5 + n % 50
                        timings = (
                            (await timed(lambda: through.evaluate("1")))[0],
                            (await timed(lambda: straight.evaluate("1")))[0],
                            (await timed(functools.partial(through.mouse.move, x, 5)))[0],
                            (await timed(functools.partial(straight.mouse.move, x, 5)))[0],
                        )
                        if n >= 10:  # warm-up
                            for key, ms in zip(samples, timings, strict=True):
                                samples[key].append(ms)
            finally:
                direct.terminate()
                direct.wait(10)
    print(summary('through relaydesk: page.evaluate("1")', samples["rd"]))
    print(summary('direct CDP: page.evaluate("1")', samples["direct"]))
    added = percentile(samples["rd"], 0.5) - percentile(samples["direct"], 0.5)
    print(f"added by relaydesk, p50: {added:.2f} ms (target <= 1.5 ms)")
    print(summary("through relaydesk: mouse.move (gated)", samples["rd_move"]))
    print(summary("direct CDP: mouse.move", samples["direct_move"]))
    added = percentile(samples["rd_move"], 0.5) - percentile(samples["direct_move"], 0.5)
    print(f"added by relaydesk to input, p50: {added:.2f} ms")


def main() -> None:
    args = parser(__doc__ or "").parse_args()
    asyncio.run(run(args.quick))


if __name__ == "__main__":
    main()
