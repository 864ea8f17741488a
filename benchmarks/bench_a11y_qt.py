"""The accessibility tools on a Qt app, beside the same form in GTK: HTTP → server → relay → the
desktop's worker, one run.

One desktop runs the tests' Qt form (``tests/support/a11y_qt_app.py``, Qt 5) and GTK form
(``tests/support/a11y_app.py``). Interleaved in rounds: ``desktop_observe`` of each window, a
screenshot round trip, ``desktop_find`` of each Save button and ``desktop_click`` on it by ref
(a click drops its app's kept tree: the next round's observe reads the tree again). Then
observes back to back (warm: the kept tree) and observes after the kept trees expired (cold,
> 1 s idle). Prints p50/p99 of each, the elements each window lists, shows and has, and the
load average at the start and the end.

Run: ``python -m benchmarks.bench_a11y_qt [--quick]``. Needs what the accessibility tests need
and Debian's python3-pyqt5 (scripts/install installs them).
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.bench_a11y import Timer, p50
from benchmarks.common import parser, summary
from tests.support.a11y_stack import FORM, QT_FORM, a11y_stack
from tests.support.processes import scaled
from tests.support.stack import wait_until

QT_APP, QT_WINDOW = "a11y_qt_app.py", "relaydesk qt form"
GTK_APP, GTK_WINDOW = "a11y_app.py", "relaydesk form"
SAVE = 'push_button[name="Save"]'


def _load() -> str:
    return "/".join(f"{v:.2f}" for v in os.getloadavg())


async def _rounds(timer: Timer, rounds: int, cold: int) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {}

    def add(name: str, ms: float) -> None:
        samples.setdefault(name, []).append(ms)

    for _ in range(rounds):
        for tag, app, window in (("qt", QT_APP, QT_WINDOW), ("gtk", GTK_APP, GTK_WINDOW)):
            add(f"observe_{tag}", (await timer.call("desktop_observe", window=window))[0])
            ms, found = await timer.call("desktop_find", selector=SAVE, app=app)
            add(f"find_{tag}", ms)
            ms, clicked = await timer.call("desktop_click", ref=found["matches"][0]["ref"])
            assert clicked["method"] == "native", clicked
            add(f"click_{tag}", ms)
        add("screenshot", (await timer.call("screen", action="screenshot"))[0])
    for tag, window in (("qt", QT_WINDOW), ("gtk", GTK_WINDOW)):
        for _ in range(rounds):
            add(f"observe_{tag}_warm", (await timer.call("desktop_observe", window=window))[0])
    for _ in range(cold):
        for tag, window in (("qt", QT_WINDOW), ("gtk", GTK_WINDOW)):
            await asyncio.sleep(1.2)  # > the 1 s a kept tree lives
            add(f"observe_{tag}_cold", (await timer.call("desktop_observe", window=window))[0])
    return samples


async def run(quick: bool) -> None:
    rounds, cold = (3, 1) if quick else (30, 10)
    root = Path(tempfile.mkdtemp(prefix="bench-a11y-qt-"))
    async with a11y_stack(root, [QT_FORM, FORM]) as stack:
        await wait_until(lambda: stack.state("qt-form.json") != {}, scaled(30), "the Qt form")
        await stack.wait_app(QT_APP)
        await stack.wait_app(GTK_APP)
        timer = Timer(stack)
        print(f"load average (1/5/15 min) at the start: {_load()}")
        started = time.monotonic()
        samples = await _rounds(timer, rounds, cold)
        for name, values in samples.items():
            print(summary(name, values))
        for tag, app, window in (("qt", QT_APP, QT_WINDOW), ("gtk", GTK_APP, GTK_WINDOW)):
            _, listed = await timer.call("desktop_observe", window=window)
            _, showing = await timer.call("desktop_observe", window=window, view="all")
            _, tree = await timer.call("desktop_find", selector="*", app=app, limit=200)
            print(
                f"{tag} window: {listed['nodes']} elements listed, {showing['nodes']} showing, "
                f"{tree['count']} in the app's tree; text {len(listed['text'].encode())} B"
            )
        shot = p50(samples["screenshot"])
        print(
            f"ratio observe/screenshot p50: qt {p50(samples['observe_qt']) / shot:.2f}, "
            f"gtk {p50(samples['observe_gtk']) / shot:.2f}"
        )
        print(
            f"click by ref p50: qt {p50(samples['click_qt']):.1f} ms, "
            f"gtk {p50(samples['click_gtk']):.1f} ms"
        )
        print(f"load average at the end ({time.monotonic() - started:.0f} s later): {_load()}")
        await timer.client.close()


def main() -> None:
    args = parser(__doc__ or "").parse_args()
    asyncio.run(run(args.quick))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
