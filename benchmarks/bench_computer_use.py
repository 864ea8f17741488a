"""The computer-use doors and the ``effect`` verdict, measured (docs/computer-use.md).

Three parts, one run:

- **effect**: a private Xvfb with a Tk window of known truths (``tests/support/effect_app.py``)
  and the relay's screen service; a scripted set of input actions (clicks on a button that
  changes, on a label, on empty space, on a text field; typing into the focused field; keys
  with no window to receive them), each with its expected verdict. Printed: the share judged
  right, and the action's time when the screen changed (``effect_ms`` p50) and when it did not.
- **doors**: a server, a real relay and a real 1280x800 desktop; interleaved, the typed
  ``screen`` action's click (after a screenshot) and screenshot against the Anthropic door's
  ``left_click`` and ``screenshot`` (at the same size: no scaling). Ratios of the medians.
- **mapping**: desktops at 1366x768, 1920x1200 and 2560x1440 with the default scaled display;
  clicks at every display point of a sparse grid, read back through X (the event recorder):
  the largest distance from the mapped pixel.

The doors and the mapping share one server and relay; all four desktops run throughout both.

Run: ``python -m benchmarks.bench_computer_use [--quick]``.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from Xlib import X, display

from benchmarks.common import parser, percentile, summary
from relay.screen.service import ScreenService
from server.computer_use.display import Display, default_size
from tests.support import effect_app
from tests.support.recorded import Desktop, recorded_desktops
from tests.support.stack import Seed
from tests.support.xvfb import private_xvfb
from wire.guard import crop_rect, cut, encode_crop
from wire.ids import RelayId

ORIGIN = (100, 100)
TARGETS = {"click": 1.15, "screenshot": 1.2}
DOORS = "doors"  # the doors' desktop's slot
MAPPED = {"main": (1366, 768), "wide": (1920, 1200), "big": (2560, 1440)}
Parts = tuple[Any, str, Seed, str, dict[str, Desktop]]


def _at(point: tuple[int, int]) -> tuple[int, int]:
    return ORIGIN[0] + point[0], ORIGIN[1] + point[1]


async def _click(svc: ScreenService, disp: str, point: tuple[int, int]) -> dict[str, Any]:
    shot = await svc.screenshot(disp, {})
    rect = crop_rect(point, (shot.width, shot.height))
    guard = {"crop": encode_crop(cut(shot.pixels, rect)), "rect": rect.to_dict()}
    return await svc.run(disp, "click", {"x": point[0], "y": point[1], "guard": guard})


def _no_focus(disp: str) -> None:
    conn = display.Display(disp)
    try:
        conn.set_input_focus(X.PointerRoot, X.RevertToPointerRoot, X.CurrentTime)
        conn.sync()
    finally:
        conn.close()


async def _script(svc: ScreenService, disp: str) -> list[tuple[str, str, dict[str, Any], float]]:
    """One pass: (case, expected, answer, seconds) for each scripted action."""
    done: list[tuple[str, str, dict[str, Any], float]] = []

    async def timed(case: str, expected: str, act: Any) -> None:
        start = time.perf_counter()
        answer = await act
        done.append((case, expected, answer, time.perf_counter() - start))

    await timed("button", "changed", _click(svc, disp, _at(effect_app.BUTTON)))
    await timed("label", "no_visible_change", _click(svc, disp, _at(effect_app.LABEL)))
    await timed("empty", "no_visible_change", _click(svc, disp, _at(effect_app.EMPTY)))
    await timed("field", "changed", _click(svc, disp, _at(effect_app.FIELD)))
    await timed("type", "changed", svc.run(disp, "type", {"text": "ab"}))
    await timed("shift", "no_visible_change", svc.run(disp, "key", {"keys": "shift"}))
    await timed("backspace", "changed", svc.run(disp, "key", {"keys": "BackSpace"}))
    # The field loses the focus, but far from the point: nothing changed around it.
    await timed("bare window", "no_visible_change", _click(svc, disp, _at(effect_app.EMPTY)))
    await timed("bare again", "no_visible_change", _click(svc, disp, _at(effect_app.EMPTY)))
    await timed("key, no field", "no_visible_change", svc.run(disp, "key", {"keys": "x"}))
    scroll = {"x": _at(effect_app.EMPTY)[0], "y": _at(effect_app.EMPTY)[1], "amount": 2}
    await timed("scroll", "no_visible_change", svc.run(disp, "scroll", scroll))
    _no_focus(disp)
    await svc.run(disp, "move", {"x": 1200, "y": 750})
    await timed("no focus", "unverifiable", svc.run(disp, "type", {"text": "x"}))
    return done


async def effects(quick: bool) -> None:
    passes = 2 if quick else 10
    with private_xvfb(1280, 800) as xvfb:
        env = {**os.environ, "DISPLAY": xvfb.display}
        command = [sys.executable, "-m", "tests.support.effect_app", *map(str, ORIGIN)]
        app = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)
        svc = ScreenService()
        try:
            assert app.stdout is not None and app.stdout.readline().strip() == "ready"
            rows = [row for _ in range(passes) for row in await _script(svc, xvfb.display)]
        finally:
            await svc.aclose()
            app.terminate()
            app.wait(timeout=10)
    right = [row for row in rows if row[2].get("effect") == row[1]]
    wrong = sorted(
        {f"{c}: {a.get('effect')} (expected {e})" for c, e, a, _ in rows if a.get("effect") != e}
    )
    print(
        f"effect: {len(right)}/{len(rows)} right ({100 * len(right) / len(rows):.1f} %; "
        "target >= 95 %)"
    )
    for line in wrong:
        print(f"  wrong: {line}")
    changed = [float(a["effect_ms"]) for _, _, a, _ in rows if a.get("effect") == "changed"]
    unchanged = [s * 1000 for _, _, a, s in rows if a.get("effect") == "no_visible_change"]
    print(summary("effect_ms when changed (target p50 <= 25)", changed))
    print(summary("action time with no visible change (cap 150 + the action)", unchanged))


async def _post(http: httpx.AsyncClient, url: str, body: dict[str, Any]) -> float:
    start = time.perf_counter()
    response = await http.post(url, json=body)
    elapsed = (time.perf_counter() - start) * 1000
    if response.status_code != 200 or response.json().get("is_error") is True:
        raise RuntimeError(f"{url}: {response.status_code} {response.text[:300]}")
    return elapsed


async def doors(parts: Parts, quick: bool) -> None:
    rounds, per_round = (1, 3) if quick else (5, 20)
    app, url, seed, relay_id, desktops = parts
    row = {"desktop_session_id": desktops[DOORS].session_id, "kind": "virtual", "slot": DOORS}
    await app.state.parts.inventory.record_started(RelayId(relay_id), row)
    root_url = f"{url}/api/v1/conversations/{seed.conversation_id}/computer-use"
    door = f"{root_url}/anthropic/relay-1/virtual/{DOORS}"
    typed = f"{url}/api/v1/actions/screen"
    headers = {"Authorization": f"Bearer {seed.api_token}"}
    base = {"conversation_id": seed.conversation_id, "relay": "relay-1"}
    point = (40, 40)
    kinds = ("typed_click", "door_click", "typed_shot", "door_shot")
    samples: dict[str, list[list[float]]] = {k: [] for k in kinds}
    async with httpx.AsyncClient(timeout=60, headers=headers) as http:
        for index in range(rounds + 1):
            got: dict[str, list[float]] = {k: [] for k in samples}
            for n in range(per_round):
                for way in ("typed", "door") if (n + index) % 2 == 0 else ("door", "typed"):
                    if way == "typed":
                        shot = await http.post(typed, json={**base, "action": "screenshot"})
                        got["typed_shot"].append(shot.elapsed.total_seconds() * 1000)
                        revision = shot.json()["screen_revision"]
                        click = {
                            **base,
                            "action": "click",
                            "x": point[0],
                            "y": point[1],
                            "expected_screen_revision": revision,
                        }
                        got["typed_click"].append(await _post(http, typed, click))
                    else:
                        got["door_shot"].append(await _post(http, door, {"action": "screenshot"}))
                        body = {"action": "left_click", "coordinate": list(point)}
                        got["door_click"].append(await _post(http, door, body))
            if index:  # the first round warms up connections and caches
                for key, values in got.items():
                    samples[key].append(values)
    print(f"doors: {rounds} interleaved rounds x {per_round}, one 1280x800 desktop")
    for measure, target in (("click", TARGETS["click"]), ("shot", TARGETS["screenshot"])):
        for way in ("typed", "door"):
            print(summary(f"{measure} {way}", [s for r in samples[f"{way}_{measure}"] for s in r]))
        pairs = zip(samples[f"door_{measure}"], samples[f"typed_{measure}"], strict=True)
        ratios = [percentile(d, 0.5) / percentile(t, 0.5) for d, t in pairs]
        print(
            f"ratio {measure} door/typed p50: {statistics.median(ratios):.2f}x "
            f"(per round {min(ratios):.2f}-{max(ratios):.2f}; target <= {target}x)"
        )


async def mapping(parts: Parts, quick: bool) -> None:
    step = 193 if quick else 23
    app, url, seed, relay_id, desktops = parts
    headers = {"Authorization": f"Bearer {seed.api_token}"}
    async with httpx.AsyncClient(timeout=60, headers=headers) as http:
        for slot, size in MAPPED.items():
            row = {
                "desktop_session_id": desktops[slot].session_id,
                "kind": "virtual",
                "slot": slot,
            }
            await app.state.parts.inventory.record_started(RelayId(relay_id), row)
            door = (
                f"{url}/api/v1/conversations/{seed.conversation_id}/computer-use/"
                f"anthropic/relay-1/virtual/{slot}"
            )
            shown = Display(size, default_size(size))
            recorder = desktops[slot].recorder
            recorder.drain()
            worst, clicks = 0, 0
            await _post(http, door, {"action": "screenshot"})
            for x in range(0, shown.shown[0], step * 3):
                for y in range(0, shown.shown[1], step * 2):
                    await _post(http, door, {"action": "left_click", "coordinate": [x, y]})
                    presses = [e for e in recorder.drain() if e["type"] == "ButtonPress"]
                    want = shown.to_screen(x, y)
                    got = (presses[0]["x"], presses[0]["y"]) if presses else (-(10**6), 0)
                    worst = max(worst, abs(got[0] - want[0]), abs(got[1] - want[1]))
                    clicks += 1
            print(
                f"mapping {size[0]}x{size[1]} shown {shown.shown[0]}x{shown.shown[1]}: "
                f"{clicks} clicks, largest error {worst} px (target 0)"
            )


async def run(quick: bool, names: list[str]) -> None:
    if "effect" in names:
        await effects(quick)
    # The doors and the mapping share one server, relay and set of desktops.
    sizes = {
        **({DOORS: (1280, 800)} if "doors" in names else {}),
        **(MAPPED if "mapping" in names else {}),
    }
    if not sizes:
        return
    root = Path(tempfile.mkdtemp(prefix="bench-cu-"))
    async with recorded_desktops(root, sizes) as parts:
        for name in names:
            if name != "effect":
                await {"doors": doors, "mapping": mapping}[name](parts, quick)


def main() -> None:
    p = parser(__doc__ or "")
    p.add_argument("parts", nargs="*", default=["effect", "doors", "mapping"])
    args = p.parse_args()
    asyncio.run(run(args.quick, args.parts))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
