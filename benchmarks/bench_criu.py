"""Memory snapshots with CRIU: checkpoint a running minimal desktop and restore it N times.

The desktop is the ``minimal`` profile's processes as the relay starts them (Xvfb, openbox,
x11vnc with the relay's flags, an xterm showing text and the time it was started, each in a
session of its own), under one root process in a PID and an IPC namespace of their own: CRIU
dumps one process tree, a restore recreates the namespaces (no clash with PIDs taken since),
and the IPC namespace carries the MIT-SHM segments Xvfb and x11vnc share. Nothing outside the
tree holds a connection at the checkpoint (see ``--viewer`` for a connected viewer).

Measured, in one run: a cold start of that tree to its first frame (x11vnc's RFB banner, then
a screenshot through the relay's own capture path), the baseline; ``criu check``; one
checkpoint of a settled desktop (the xterm managed, two equal screenshots in a row; ``criu
dump``: time, image size); then N restores of that image, each to its first frame, each
screenshot compared pixel by pixel with the one taken just before the checkpoint. The verdict
applies the rule for offering memory snapshots: every restore works and every restored screen
is pixel-identical. Needs root (CRIU does). Findings and figures: docs/desktops.md, "Memory
snapshots"; runs: benchmarks/results/criu.md.

Run: ``.venv/bin/python -m benchmarks.bench_criu [--quick] [--restores N] [--criu PATH]
[--vnc-unix] [--share-ipc] [--private-pts] [--viewer] [--keep]``.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from benchmarks.common import percentile
from relay.desktops.config import LOW_LATENCY_X11VNC_FLAGS, DesktopSettings
from relay.screen.capture import ScreenCapture

GEOMETRY = "1024x768x24"
RULE_RESTORES = 20
READY_TIMEOUT_S = 30.0
CRIU_TIMEOUT_S = 120.0
_POLL_S = 0.05
_PR_SET_CHILD_SUBREAPER = 36
RLIMIT = "Can't setup RLIMIT_NOFILE for self"
_X11_UNIX = Path("/tmp/.X11-unix")
Pixels = npt.NDArray[np.uint8]
T = TypeVar("T")

# The tree's root: pid 1 of the new PID namespace. Each program gets a session of its own, as
# the relay's ``start_new_session=True`` gives it; stdio goes to /dev/null (CRIU refuses to
# restore a regular file whose size changed since the checkpoint).
ROOT_SCRIPT = """\
exec </dev/null >/dev/null 2>&1
{private_pts}
setsid Xvfb :{display} -screen 0 {geometry} -nolisten tcp -noreset &
while [ ! -S /tmp/.X11-unix/X{display} ]; do sleep 0.02; done
export DISPLAY=:{display}
setsid {window_manager} &
until xprop -root _NET_SUPPORTING_WM_CHECK | grep -q window; do sleep 0.02; done
setsid x11vnc -display :{display} -localhost -noipv6 -shared -forever -quiet -nopw \
    {listen} -noprimary -nolookup {x11vnc_flags} &
setsid xterm -T snapshot-probe -geometry 80x20+40+40 -e sh -c \
    'echo "relaydesk memory snapshot probe"; echo "started $(date -u +%T.%N)"; exec cat' &
wait
"""


# Pseudo-terminals numbered in the tree's own devpts, so a restore never finds the xterm's
# number taken by another program of the host. Namespace files mounted on the host (a
# container engine's, say) are unmounted in the tree's copy: CRIU cannot dump them.
PRIVATE_PTS = (
    "mount -t devpts -o newinstance,ptmxmode=0666,mode=620 devpts /dev/pts && "
    "mount --bind /dev/pts/ptmx /dev/ptmx; "
    "awk '$3 == \"nsfs\" {print $2}' /proc/self/mounts | xargs -r -n1 umount"
)


class ProbeError(Exception):
    """A step of the probe failed; the message says which and why."""


@dataclass
class Tree:
    """One running desktop tree: its root (host PID) and where it answers."""

    root: int
    display: int
    vnc: str  # 127.0.0.1:port or the path of x11vnc's unix socket
    launcher: subprocess.Popen[bytes] | None = None

    def stop(self) -> None:
        """SIGKILL to the namespace's pid 1 ends every process of the namespace."""
        with _suppress_gone():
            os.kill(self.root, signal.SIGKILL)
        _reap(self.root)
        if self.launcher is not None:
            self.launcher.wait(timeout=10)


def _suppress_gone() -> contextlib.suppress:
    return contextlib.suppress(ProcessLookupError, ChildProcessError)


def _reap(pid: int) -> None:
    """Wait for ``pid`` (our child, or reparented to us as subreaper) to be gone."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with _suppress_gone():
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return
        if not Path(f"/proc/{pid}").exists():
            return
        time.sleep(_POLL_S)
    raise ProbeError(f"process {pid} still alive 10 s after SIGKILL")


def free_display() -> int:
    for n in range(300, 400):
        if not Path(f"/tmp/.X{n}-lock").exists() and not (_X11_UNIX / f"X{n}").exists():
            return n
    raise ProbeError("no free display number in 300..399")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def clear_display(display: int) -> None:
    """Remove what our X server leaves (its lock and socket files) for the next restore."""
    for path in (Path(f"/tmp/.X{display}-lock"), _X11_UNIX / f"X{display}"):
        path.unlink(missing_ok=True)


@dataclass(frozen=True)
class Variant:
    """What the tree shares with the host: its IPC namespace, x11vnc's TCP listener."""

    share_ipc: bool
    vnc_unix: bool
    private_pts: bool = False

    def describe(self) -> str:
        namespaces = "pid" if self.share_ipc else "pid+ipc"
        listener = "unix socket" if self.vnc_unix else "TCP on loopback"
        if self.private_pts:
            namespaces += "+mount (a devpts of its own)"
        return f"namespaces {namespaces}, x11vnc listening on {listener}"


def start_tree(workdir: Path, variant: Variant) -> Tree:
    display = free_display()
    if variant.vnc_unix:
        vnc = str(workdir / f"vnc-{display}.sock")
        listen = f"-rfbport 0 -unixsock {vnc}"
    else:
        vnc = f"127.0.0.1:{free_port()}"
        listen = f"-rfbport {vnc.rpartition(':')[2]}"
    script = workdir / "root.sh"
    script.write_text(
        ROOT_SCRIPT.format(
            display=display,
            listen=listen,
            private_pts=PRIVATE_PTS if variant.private_pts else "",
            geometry=GEOMETRY,
            window_manager=" ".join(DesktopSettings().window_manager),
            x11vnc_flags=" ".join(LOW_LATENCY_X11VNC_FLAGS),
        )
    )
    namespaces = ["--pid"] + ([] if variant.share_ipc else ["--ipc"])
    namespaces += ["--mount"] if variant.private_pts else []
    launcher = subprocess.Popen(
        ["unshare", *namespaces, "--fork", "setsid", "sh", str(script)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    root = _wait_for(lambda: _only_child(launcher.pid), "the namespace's pid 1")
    return Tree(root, display, vnc, launcher)


def _only_child(pid: int) -> int | None:
    try:
        words = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return None
    return int(words[0]) if words else None


def _wait_for(probe: Callable[[], T | None], what: str) -> T:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if (value := probe()) is not None:
            return value
        time.sleep(_POLL_S)
    raise ProbeError(f"{what}: not ready in {READY_TIMEOUT_S:.0f} s")


def connect(vnc: str) -> socket.socket:
    if vnc.startswith("/"):
        sock = socket.socket(socket.AF_UNIX)
        sock.settimeout(2)
        try:
            sock.connect(vnc)
        except OSError:
            sock.close()
            raise
        return sock
    host, _, port = vnc.rpartition(":")
    return socket.create_connection((host, int(port)), timeout=2)


def rfb_banner(vnc: str) -> bytes | None:
    try:
        with connect(vnc) as sock:
            banner = sock.recv(12)
    except OSError:
        return None
    return banner if banner.startswith(b"RFB ") else None


def capture(display: int) -> Pixels | None:
    """The whole screen through the relay's screenshot path; the X connection is closed
    before this returns, so no client outside the tree is left on the X server."""
    if not (_X11_UNIX / f"X{display}").exists():
        return None
    try:
        shot = ScreenCapture(f":{display}")
    except Exception:  # not accepting clients yet
        return None
    try:
        return shot.grab()
    finally:
        shot.close()


def xterm_shown(display: int) -> bool:
    env = {"PATH": os.environ["PATH"], "DISPLAY": f":{display}"}
    done = subprocess.run(["wmctrl", "-l"], env=env, capture_output=True, text=True, check=False)
    return "snapshot-probe" in done.stdout


def first_frame(tree: Tree, settle: bool) -> Pixels:
    """Wait for x11vnc's banner, then a capture (two equal in a row when ``settle``: the
    xterm's text drawn)."""
    _wait_for(lambda: rfb_banner(tree.vnc), "x11vnc's RFB banner")
    if not settle:
        return _wait_for(lambda: capture(tree.display), "a screenshot")
    _wait_for(lambda: True if xterm_shown(tree.display) else None, "the xterm window")
    previous = _wait_for(lambda: capture(tree.display), "a screenshot")
    while True:
        time.sleep(0.2)
        current = _wait_for(lambda: capture(tree.display), "a screenshot")
        if np.array_equal(previous, current):
            return current
        previous = current


@dataclass
class CriuRun:
    ok: bool
    seconds: float
    errors: list[str] = field(default_factory=list)


def run_criu(criu: str, args: list[str], log: Path | None = None) -> CriuRun:
    started = time.perf_counter()
    done = subprocess.run(
        [criu, *args], capture_output=True, text=True, timeout=CRIU_TIMEOUT_S, check=False
    )
    seconds = time.perf_counter() - started
    text = done.stdout + done.stderr
    if log is not None and log.exists():
        text += log.read_text(errors="replace")
    # The last error lines say why it failed; earlier ones may be warnings CRIU logs as errors
    # (e.g. it may not raise its own RLIMIT_NOFILE inside a container).
    errors = [line.strip() for line in text.splitlines() if "Error" in line and RLIMIT not in line]
    return CriuRun(done.returncode == 0, seconds, errors)


def criu_version(criu: str) -> str:
    done = subprocess.run([criu, "--version"], capture_output=True, text=True, check=False)
    return done.stdout.split("\n")[0].removeprefix("Version: ").strip() or "unknown"


def image_bytes(directory: Path, pattern: str = "*.img") -> int:
    return sum(p.stat().st_size for p in directory.glob(pattern))


@dataclass
class Results:
    cold_s: list[float] = field(default_factory=list)
    check: CriuRun | None = None
    dump: CriuRun | None = None
    image_mb: float = 0.0
    pages_mb: float = 0.0
    restores: int = 0
    restored: int = 0
    identical: int = 0
    restore_s: list[float] = field(default_factory=list)
    frame_s: list[float] = field(default_factory=list)
    differing_pixels: list[int] = field(default_factory=list)
    restore_errors: list[str] = field(default_factory=list)


def cold_starts(workdir: Path, count: int, variant: Variant, results: Results) -> None:
    for i in range(count):
        started = time.perf_counter()
        tree = start_tree(workdir, variant)
        try:
            first_frame(tree, settle=False)
            results.cold_s.append(time.perf_counter() - started)
        finally:
            tree.stop()
            clear_display(tree.display)
        print(f"cold start {i + 1}/{count}: {results.cold_s[-1] * 1000:.0f} ms", flush=True)


def checkpoint(
    criu: str, workdir: Path, variant: Variant, viewer: bool, results: Results
) -> tuple[Tree, Pixels, Path]:
    tree = start_tree(workdir, variant)
    before = first_frame(tree, settle=True)
    images = workdir / "images"
    images.mkdir()
    args = ["dump", "-t", str(tree.root), "-D", str(images), "-v4", "-o", "dump.log"]
    client = connect(tree.vnc) if viewer else None
    if viewer:
        # The viewer's end lives outside the tree: CRIU's options for such a connection.
        args.append("--ext-unix-sk" if variant.vnc_unix else "--tcp-established")
    try:
        results.dump = run_criu(criu, args, images / "dump.log")
    finally:
        if client is not None:
            client.close()
    results.image_mb = image_bytes(images) / 1e6
    results.pages_mb = image_bytes(images, "pages-*.img") / 1e6
    state = "ok" if results.dump.ok else "FAILED"
    print(
        f"checkpoint: {state} in {results.dump.seconds * 1000:.0f} ms, "
        f"image {results.image_mb:.1f} MB (memory pages {results.pages_mb:.1f} MB)",
        flush=True,
    )
    for line in results.dump.errors[:5]:
        print(f"  {line}", flush=True)
    return tree, before, images


def restore_once(
    criu: str, images: Path, tree: Tree, before: Pixels, i: int, r: Results, private_pts: bool
) -> None:
    clear_display(tree.display)
    pidfile = images / f"restore-{i}.pid"
    log = f"restore-{i}.log"
    args = ["restore", "-D", str(images), "-d", "--pidfile", str(pidfile), "-v4", "-o", log]
    if private_pts:
        args += ["--root", "/"]  # a mount namespace is restored only onto a given root
    started = time.perf_counter()
    run = run_criu(criu, args, images / log)
    if not run.ok:
        r.restore_errors.extend(run.errors[-3:])
        print(f"restore {i}: FAILED: {run.errors[-3:]}", flush=True)
        return
    r.restored += 1
    r.restore_s.append(run.seconds)
    restored = Tree(int(pidfile.read_text()), tree.display, tree.vnc)
    try:
        after = first_frame(restored, settle=False)
        r.frame_s.append(time.perf_counter() - started)
    finally:
        restored.stop()
    differing = int(np.count_nonzero(np.any(after != before, axis=-1)))
    r.differing_pixels.append(differing)
    r.identical += differing == 0
    print(
        f"restore {i}: ok in {run.seconds * 1000:.0f} ms, first frame "
        f"{r.frame_s[-1] * 1000:.0f} ms, pixels differing: {differing}",
        flush=True,
    )


def run(args: argparse.Namespace, workdir: Path) -> Results:
    results = Results(restores=args.restores)
    variant = Variant(args.share_ipc, args.vnc_unix, args.private_pts)
    cold_starts(workdir, args.cold, variant, results)
    results.check = run_criu(args.criu, ["check"])
    print(f"criu check: {'ok' if results.check.ok else 'FAILED'}", flush=True)
    for line in results.check.errors[:5]:
        print(f"  {line}", flush=True)
    if not results.check.ok:
        return results
    tree, before, images = checkpoint(args.criu, workdir, variant, args.viewer, results)
    try:
        if not results.dump or not results.dump.ok:
            return results
        if tree.launcher is not None:
            tree.launcher.wait(timeout=10)
        for i in range(1, args.restores + 1):
            restore_once(args.criu, images, tree, before, i, results, args.private_pts)
    finally:
        if Path(f"/proc/{tree.root}").exists():
            tree.stop()
        clear_display(tree.display)
    return results


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def report(args: argparse.Namespace, r: Results) -> bool:
    cold = statistics.median(r.cold_s)
    print()
    print(
        f"conditions: kernel {platform.release()}, criu {criu_version(args.criu)} "
        f"({args.criu}), {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}, "
        f"{Variant(args.share_ipc, args.vnc_unix, args.private_pts).describe()}, "
        f"viewer connected at checkpoint: {'yes' if args.viewer else 'no'}"
    )
    print(f"baseline: cold start to first frame p50 {ms(cold)} (n={len(r.cold_s)})")
    if r.check and not r.check.ok:
        print("criu check failed: nothing can be checkpointed on this host")
        for line in r.check.errors[:5]:
            print(f"  {line}")
    if r.dump is not None:
        print(
            f"checkpoint: {'ok' if r.dump.ok else 'FAILED'}, {ms(r.dump.seconds)} "
            f"(ratio {r.dump.seconds / cold:.2f} x cold start), image {r.image_mb:.1f} MB "
            f"(memory pages {r.pages_mb:.1f} MB)"
        )
        for line in r.dump.errors[:5]:
            print(f"  {line}")
    print(f"restores that worked: {r.restored}/{r.restores}")
    print(f"restored screens pixel-identical: {r.identical}/{r.restores}")
    if r.frame_s:
        frame = percentile(r.frame_s, 0.5)
        print(
            f"restore: criu p50 {ms(percentile(r.restore_s, 0.5))}, to first frame p50 "
            f"{ms(frame)} (ratio {frame / cold:.2f} x cold start), "
            f"max differing pixels {max(r.differing_pixels)}"
        )
    for line in sorted(set(r.restore_errors))[:5]:
        print(f"  {line}")
    met = r.restores >= RULE_RESTORES and r.identical == r.restores
    verdict = "met" if met else "not met"
    if r.restores < RULE_RESTORES:
        verdict += f" (it needs {RULE_RESTORES} restores: run without --quick)"
    print(
        f"verdict: the rule for memory snapshots ({RULE_RESTORES} restores in "
        f"{RULE_RESTORES}, each pixel-identical) is {verdict} by this configuration"
    )
    return met


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: 1 cold start, 2 restores")
    parser.add_argument("--restores", type=int, default=20, help="restores of one checkpoint")
    parser.add_argument("--cold", type=int, default=5, help="cold starts for the baseline")
    parser.add_argument("--criu", default="criu", help="the criu program to run")
    parser.add_argument(
        "--share-ipc",
        action="store_true",
        help="keep the host's IPC namespace (MIT-SHM segments outside the tree)",
    )
    parser.add_argument(
        "--vnc-unix",
        action="store_true",
        help="x11vnc listens on a unix socket instead of TCP (the tree then has no inet socket)",
    )
    parser.add_argument(
        "--private-pts",
        action="store_true",
        help="a mount namespace with a devpts of the tree's own (pseudo-terminal numbers)",
    )
    parser.add_argument(
        "--viewer",
        action="store_true",
        help="hold a viewer's connection to x11vnc during the checkpoint "
        "(criu: --tcp-established, or --ext-unix-sk with --vnc-unix)",
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the images and criu's logs, and say where"
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.restores, args.cold = min(args.restores, 2), 1
    if os.geteuid() != 0:
        parser.error("CRIU needs root: run as root")
    if shutil.which(args.criu) is None:
        parser.error(f"no {args.criu} on PATH (scripts/install installs Debian's criu)")
    # Restored trees are reparented to the nearest subreaper once criu exits: this process
    # reaps them, so none is left a zombie of init.
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    if args.keep:
        workdir = Path(tempfile.mkdtemp(prefix="relaydesk-criu-"))
        print(f"work directory (images and criu logs, kept): {workdir}", flush=True)
        results = run(args, workdir)
    else:
        with tempfile.TemporaryDirectory(prefix="relaydesk-criu-") as tmp:
            results = run(args, Path(tmp))
    report(args, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
