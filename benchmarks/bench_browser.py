"""The browser tools end to end: HTTP → server → relay → the desktop's Chromium over its
DevTools pipe, one run, against the accessibility (AT-SPI) tools on the same page.

On one desktop whose Chromium (started by the relay) shows a page of ~500 elements (a form,
60 buttons, a 200-row table), interleaved in rounds:

1. ``browser_snapshot`` of the page against ``desktop_observe`` of the same window through
   AT-SPI alone (``backend: "atspi"``; targets: snapshot p50 <= 0.5x observe, and <= 40 ms),
   with the elements each lists; the page unchanged between rounds, and changed before each
   (a field's value set, so the browser's tree must be read again); and ``desktop_observe``
   as routed (the chrome over AT-SPI, the page over DevTools);
2. ``browser_click`` by ref against ``desktop_click`` of the same button through AT-SPI
   (target: p50 <= 15 ms), and ``browser_downloads`` (a call that reaches the relay's browser
   service and asks the browser nothing): the floor of any browser call on that machine;
3. each backend's read right after its own act: ``browser_snapshot`` after ``browser_click``
   (the click changed the page: its tree is read again) against ``desktop_observe`` through
   AT-SPI after ``desktop_click`` (an act drops the app's kept tree: the window is read
   again). Round 1's observe answers from the tree AT-SPI keeps for up to a second; this
   pair is what an agent meets after each act with either backend.

Run: ``python -m benchmarks.bench_browser [--quick]``. Needs Xvfb, x11vnc, websockify and
Chromium (scripts/install installs them).
"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import HttpClient, parser, percentile, summary
from tests.support.a11y_stack import A11yStack
from tests.support.browser_stack import PAGES, browser_stack, page_server
from tests.support.processes import scaled

BUTTONS = "".join(
    f"<button onclick=\"this.textContent='Done {n}'\">Step {n}</button>" for n in range(1, 61)
)
ROWS = "".join(f"<tr><td>Row {n}</td><td>{n * 7} EUR</td></tr>" for n in range(1, 201))
BENCH_PAGE = "/bench.html"
PAGES[BENCH_PAGE] = (
    "<!doctype html><html><head><title>Bench page</title></head><body><h1>Bench page</h1>"
    '<form><label for="q">Query</label> <input id="q"><button type="button">Search</button>'
    f'</form>{BUTTONS}<table aria-label="Rows">{ROWS}</table></body></html>'
)
WINDOW = "Bench page - Chromium"


class Timer:
    """Actions through one kept-alive connection, timed."""

    def __init__(self, stack: A11yStack) -> None:
        self.stack = stack
        self.client = HttpClient(stack.url, {"Authorization": f"Bearer {stack.seed.api_token}"})

    async def call(self, name: str, **body: Any) -> tuple[float, dict[str, Any]]:
        payload = {"conversation_id": self.stack.seed.conversation_id, **body}
        started = time.perf_counter()
        status, result = await self.client.post_json(f"/api/v1/actions/{name}", payload)
        elapsed = (time.perf_counter() - started) * 1000
        if status != 200:
            raise RuntimeError(f"{name}: {status} {result}")
        return elapsed, result


async def _ready(timer: Timer) -> None:
    deadline = time.monotonic() + scaled(60)
    while True:
        try:
            _, seen = await timer.call("desktop_observe", window=WINDOW, max_nodes=1000)
            if 'push_button "Step 60"' in seen["text"]:
                return
        except RuntimeError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError("the bench page did not show on the accessibility bus")
        await asyncio.sleep(0.5)


def _ref(text: str, needle: str) -> str:
    return next(line.split()[0] for line in text.splitlines() if needle in line)


async def run(quick: bool) -> None:
    rounds = 3 if quick else 40
    with page_server() as base_url:
        root = Path(tempfile.mkdtemp(prefix="bench-browser-"))
        async with browser_stack(root, base_url) as stack:
            timer = Timer(stack)
            try:
                await _measure(timer, base_url, rounds)
            finally:
                await timer.client.close()


async def _measure(timer: Timer, base_url: str, rounds: int) -> None:
    deadline = time.monotonic() + scaled(60)
    while True:
        try:
            await timer.call("browser_open", url=f"{base_url}{BENCH_PAGE}")
            break
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)
    await _ready(timer)
    snapshot_ms: list[float] = []
    changed_ms: list[float] = []
    observe_ms: list[float] = []
    routed_ms: list[float] = []
    sizes: dict[str, int] = {}
    _, snap = await timer.call("browser_snapshot", max_nodes=1000)
    query = _ref(snap["text"], 'entry "Query"')
    for n in range(rounds):
        elapsed, snap = await timer.call("browser_snapshot", max_nodes=1000)
        snapshot_ms.append(elapsed)
        sizes["snapshot"] = snap["nodes"]
        await timer.call("browser_fill", ref=query, text=f"round {n}")
        elapsed, _ = await timer.call("browser_snapshot", max_nodes=1000)
        changed_ms.append(elapsed)
        query = _ref(snap["text"], 'entry "Query"')
        elapsed, seen = await timer.call(
            "desktop_observe", window=WINDOW, max_nodes=1000, backend="atspi"
        )
        observe_ms.append(elapsed)
        sizes["observe"] = seen["nodes"]
        elapsed, routed = await timer.call("desktop_observe", window=WINDOW, max_nodes=1000)
        routed_ms.append(elapsed)
        sizes["routed"] = routed["nodes"]
    ref = _ref(snap["text"], 'push_button "Step 30"')
    _, found = await timer.call(
        "desktop_find", selector='push_button[name="Step 31"]', window=WINDOW, backend="atspi"
    )
    a11y_ref = found["matches"][0]["ref"]
    click_ms: list[float] = []
    a11y_click_ms: list[float] = []
    floor_ms: list[float] = []
    clicked_ms: list[float] = []
    reread_ms: list[float] = []
    for _ in range(rounds):
        click_ms.append((await timer.call("browser_click", ref=ref))[0])
        elapsed, snap = await timer.call("browser_snapshot", max_nodes=1000)
        clicked_ms.append(elapsed)
        ref = _ref(snap["text"], 'push_button "Done 30"')
        a11y_click_ms.append((await timer.call("desktop_click", ref=a11y_ref))[0])
        # An act drops the app's kept tree: this observe reads the window again.
        elapsed, _ = await timer.call(
            "desktop_observe", window=WINDOW, max_nodes=1000, backend="atspi"
        )
        reread_ms.append(elapsed)
        floor_ms.append((await timer.call("browser_downloads"))[0])
    print(summary(f"browser_snapshot ({sizes['snapshot']} elements)", snapshot_ms))
    print(summary("browser_snapshot after a change in the page", changed_ms))
    print(summary(f"desktop_observe atspi, same window ({sizes['observe']} elements)", observe_ms))
    print(summary(f"desktop_observe routed ({sizes['routed']} elements)", routed_ms))
    for label, measured in (("snapshot", snapshot_ms), ("changed snapshot", changed_ms)):
        ratio = percentile(measured, 0.5) / percentile(observe_ms, 0.5)
        print(f"{label} / observe p50 ratio: {ratio:.2f} (target <= 0.5)")
    print(summary("browser_click by ref", click_ms))
    print(summary("desktop_click by ref, same kind of button", a11y_click_ms))
    print(summary("browser_downloads (the floor: no browser call)", floor_ms))
    ratio = percentile(click_ms, 0.5) / percentile(a11y_click_ms, 0.5)
    print(f"browser_click / desktop_click p50 ratio: {ratio:.2f}")
    print(summary("browser_snapshot right after browser_click", clicked_ms))
    print(summary("desktop_observe atspi right after desktop_click (read again)", reread_ms))
    ratio = percentile(clicked_ms, 0.5) / percentile(reread_ms, 0.5)
    print(f"after an act, snapshot / observe p50 ratio: {ratio:.2f}")


def main() -> None:
    args = parser(__doc__ or "").parse_args()
    asyncio.run(run(args.quick))


if __name__ == "__main__":
    main()
