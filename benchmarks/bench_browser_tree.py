"""Where a browser snapshot's time goes once the page has changed: the browser's own tree read,
taken apart, on the relay's own DevTools path and nothing else.

``bench_browser`` times ``browser_snapshot`` end to end. Right after a change the relay must
read the page's accessibility tree again (``relay/browser/pagetrees.py``); this benchmark
times each part of that read alone, on the same page (a form, 60 buttons, a 200-row table),
in Debian's Chromium (headless) started the way the relay starts a desktop's browser: its
DevTools pipe kept by the relay's holder on a Unix socket (``relay/browser/pipe.py``), spoken
to by the relay's own connection (``relay/browser/cdp.py``). Interleaved rounds, each after a
field's value was set:

1. the page's state, the expression a snapshot of an unchanged page costs
   (``pagetrees.PAGE_STATE``);
2. ``Accessibility.getFullAXTree``: the browser computes the whole tree, names and their
   sources included, and sends it; the relay parses it;
3. turning that tree into a snapshot's answer (``snapshot.render``, text, 1,000 elements);
4. ``Runtime.evaluate("1")``: a DevTools round trip, the floor of any call (the baseline);
5. after another value was set, for comparison, a script in the page that walks the DOM
   reading roles, labels, text, values and boxes (not the browser's accessible names,
   states or tree): what any whole read made in the page itself costs at least.

Run: ``python -m benchmarks.bench_browser_tree [--quick]``. Needs Chromium (scripts/install
installs it).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from benchmarks import bench_browser
from benchmarks.common import parser, percentile, summary, timed
from relay.browser import pipe
from relay.browser.cdp import CdpConnection
from relay.browser.pagetrees import PAGE_STATE
from relay.browser.snapshot import Snapshot, Tree, render
from relay.browser.tabs import Browser
from tests.support.browser_stack import page_server
from tests.support.processes import scaled

WALK = (
    "(()=>{const out=[];const R={BUTTON:'button',A:'link',INPUT:'textbox',TEXTAREA:'textbox',"
    "SELECT:'combobox',H1:'heading',H2:'heading',TD:'cell',TH:'columnheader',TR:'row',"
    "TABLE:'table',FORM:'form',LABEL:'LabelText',IMG:'img'};"
    "const walk=(el,p)=>{for(const c of el.children){if(!c.checkVisibility())continue;"
    "const r=c.getAttribute('role')||R[c.tagName];let i=p;"
    "if(r){const l=c.labels&&c.labels[0];const n=c.getAttribute('aria-label')"
    "||(l?l.textContent:'')||(r==='textbox'?'':c.textContent);"
    "const b=c.getBoundingClientRect();out.push([p,r,n,c.value||'',b.x,b.y,b.width,b.height]);"
    "i=out.length-1;}walk(c,i);}};walk(document.body,-1);return out;})()"
)


def _spawn(argv: list[str], fds: tuple[int, ...]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        argv,
        pass_fds=fds,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


async def _connected(socket: Path) -> CdpConnection:
    deadline = time.monotonic() + scaled(30)
    while True:
        try:
            return await CdpConnection.connect(str(socket))
        except OSError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


async def _tab(browser: Browser, url: str) -> str:
    deadline = time.monotonic() + scaled(30)
    while True:
        pages = await browser.pages()
        if pages:
            tab = str(pages[0]["targetId"])
            state = await browser.evaluate(tab, "[location.href, document.readyState]")
            if state == [url, "complete"]:
                return tab
        if time.monotonic() > deadline:
            raise RuntimeError(f"the browser did not show {url}")
        await asyncio.sleep(0.2)


async def run(quick: bool) -> None:
    rounds = 3 if quick else 40
    with page_server() as base_url, tempfile.TemporaryDirectory() as root:
        url = f"{base_url}{bench_browser.BENCH_PAGE}"
        argv = [
            "chromium",
            "--headless=new",
            f"--user-data-dir={Path(root) / 'profile'}",
            "--no-first-run",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            *(["--no-sandbox"] if os.geteuid() == 0 else []),  # a root benchmark run
            url,
        ]
        holders: list[subprocess.Popen[bytes]] = []
        state_dir = Path(root) / "state"
        state_dir.mkdir()
        child = pipe.spawn_with_devtools(
            argv, _spawn, lambda a, f: holders.append(_spawn(a, f)), state_dir
        )
        cdp = await _connected(pipe.socket_path(state_dir, child.pid))
        try:
            await _measure(Browser(cdp), url, rounds)
        finally:
            cdp.close()
            for started in (child, *holders):  # each leads a group of its own
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(started.pid, signal.SIGTERM)
                started.wait(10)


async def _measure(browser: Browser, url: str, rounds: int) -> None:
    tab = await _tab(browser, url)
    floor_ms: list[float] = []
    state_ms: list[float] = []
    read_ms: list[float] = []
    render_ms: list[float] = []
    walk_ms: list[float] = []
    sizes: dict[str, int] = {}
    for n in range(rounds):
        await browser.evaluate(tab, f"document.querySelector('#q').value = 'round {n}'")
        state_ms.append((await timed(lambda: browser.evaluate(tab, PAGE_STATE)))[0])
        elapsed, answer = await timed(lambda: browser.send(tab, "Accessibility.getFullAXTree"))
        read_ms.append(elapsed)
        sizes["nodes"] = len(answer.get("nodes", []))
        started = time.perf_counter()
        result = render(
            Tree.of(answer), Snapshot("bench", "bench", tab), 64, 1000, "interactive", "text"
        )
        render_ms.append((time.perf_counter() - started) * 1000)
        sizes["listed"] = result["nodes"]
        floor_ms.append((await timed(lambda: browser.evaluate(tab, "1")))[0])
        await browser.evaluate(tab, f"document.querySelector('#q').value = 'walk {n}'")
        elapsed, walked = await timed(lambda: browser.evaluate(tab, WALK))
        walk_ms.append(elapsed)
        sizes["walked"] = len(walked)
    floor = percentile(floor_ms, 0.5)
    print(summary("DevTools round trip, Runtime.evaluate('1') (the floor)", floor_ms))
    print(summary("the page's state (a snapshot of an unchanged page)", state_ms))
    print(summary(f"getFullAXTree read and parsed ({sizes['nodes']} nodes)", read_ms))
    print(summary(f"the tree rendered as a snapshot ({sizes['listed']} listed)", render_ms))
    print(summary(f"a DOM walk in the page ({sizes['walked']} elements)", walk_ms))
    for label, measured in (
        ("state", state_ms),
        ("tree read", read_ms),
        ("render", render_ms),
        ("DOM walk", walk_ms),
    ):
        print(f"{label} / floor p50 ratio: {percentile(measured, 0.5) / floor:.2f}")


def main() -> None:
    args = parser(__doc__ or "").parse_args()
    asyncio.run(run(args.quick))


if __name__ == "__main__":
    main()
