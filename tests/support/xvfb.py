"""A private Xvfb for tests: display picked with ``-displayfd``, stopped by its own pid.

Never reads or falls back to the developer's ``DISPLAY``: callers get the display string
of the server this helper started and pass it explicitly.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from tests.support.processes import scaled


def xvfb_available() -> bool:
    """True when the Xvfb binary is on PATH."""
    return shutil.which("Xvfb") is not None


@dataclass
class XvfbServer:
    """One Xvfb process this test run owns."""

    process: subprocess.Popen[bytes]
    display: str
    width: int
    height: int

    @property
    def pid(self) -> int:
        return self.process.pid

    def is_alive(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout: float = 5.0) -> None:
        """Terminate our Xvfb by pid, then kill it if it does not exit in time."""
        if self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=scaled(timeout))
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=scaled(timeout))


def _read_display_number(read_fd: int, proc: subprocess.Popen[bytes], timeout: float) -> int:
    """Read the display number Xvfb writes to the ``-displayfd`` pipe once it is ready."""
    deadline = time.monotonic() + timeout
    data = b""
    while not data.endswith(b"\n"):
        remaining = deadline - time.monotonic()
        if remaining <= 0 or proc.poll() is not None:
            raise RuntimeError(f"Xvfb did not report a display (exit={proc.poll()})")
        ready, _, _ = select.select([read_fd], [], [], remaining)
        if ready:
            chunk = os.read(read_fd, 64)
            if not chunk:
                raise RuntimeError("Xvfb closed the displayfd pipe without a display number")
            data += chunk
    return int(data.strip())


def start_xvfb(width: int = 1280, height: int = 800, depth: int = 24) -> XvfbServer:
    """Start Xvfb on a free display; return once the server has announced readiness."""
    read_fd, write_fd = os.pipe()
    cmd = [
        "Xvfb",
        "-displayfd",
        str(write_fd),
        "-screen",
        "0",
        f"{width}x{height}x{depth}",
        "-nolisten",
        "tcp",
        "-noreset",
        "+extension",
        "XTEST",
    ]
    proc = subprocess.Popen(
        cmd, pass_fds=(write_fd,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    os.close(write_fd)
    try:
        number = _read_display_number(read_fd, proc, scaled(15.0))
    except BaseException:
        proc.kill()
        proc.wait(timeout=scaled(5.0))
        raise
    finally:
        os.close(read_fd)
    return XvfbServer(process=proc, display=f":{number}", width=width, height=height)


@contextmanager
def private_xvfb(width: int = 1280, height: int = 800) -> Iterator[XvfbServer]:
    """Context manager around :func:`start_xvfb` that always stops the server it started."""
    server = start_xvfb(width, height)
    try:
        yield server
    finally:
        server.stop()
