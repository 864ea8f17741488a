"""Child processes for tests: own process group, log file, readiness by probing, clean kill.

Every wait takes a *nominal* timeout in seconds and scales it by
``RELAYDESK_TEST_TIMEOUT_SCALE`` itself, so callers never multiply twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

POLL_INTERVAL_S = 0.05
_TAIL_CHARS = 4000


def timeout_scale() -> float:
    """Multiplier for every test timeout, from ``RELAYDESK_TEST_TIMEOUT_SCALE`` (default 1)."""
    raw = os.environ.get("RELAYDESK_TEST_TIMEOUT_SCALE", "").strip()
    if not raw:
        return 1.0
    try:
        value = float(raw)
    except ValueError as err:
        raise ValueError(f"RELAYDESK_TEST_TIMEOUT_SCALE must be a number, not {raw!r}") from err
    if value <= 0:
        raise ValueError("RELAYDESK_TEST_TIMEOUT_SCALE must be positive")
    return value


def scaled(seconds: float) -> float:
    """``seconds`` stretched by the timeout scale."""
    return seconds * timeout_scale()


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that was free on ``host`` a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def port_is_open(port: int, host: str = "127.0.0.1", timeout: float = 0.2) -> bool:
    """True when something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


class ProcessExited(RuntimeError):
    """The process ended while a test was waiting for it to become ready."""


class ProcessTimeout(TimeoutError):
    """A wait on a managed process ran out of time."""


def _group_members(pgid: int) -> list[int]:
    """Pids of live (non-zombie) processes whose process group is ``pgid``."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid pgrp ..." — comm may contain spaces and parentheses.
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) >= 3 and fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


class ManagedProcess:
    """A child in its own session/process group whose output goes to a log file."""

    def __init__(
        self,
        argv: Sequence[str],
        log_path: Path,
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | str | None = None,
        name: str | None = None,
    ) -> None:
        self.argv = [str(arg) for arg in argv]
        self.log_path = log_path
        self.env = dict(env) if env is not None else None
        self.cwd = cwd
        self.name = name or Path(self.argv[0]).name
        self._popen: subprocess.Popen[bytes] | None = None

    def __repr__(self) -> str:
        state = "not started" if self._popen is None else f"pid={self._popen.pid}"
        return f"<ManagedProcess {self.name} {state}>"

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> ManagedProcess:
        """Start the process with stdout and stderr appended to ``log_path``."""
        if self._popen is not None:
            raise RuntimeError(f"{self.name} already started")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self._popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,
            )
        return self

    @property
    def popen(self) -> subprocess.Popen[bytes]:
        if self._popen is None:
            raise RuntimeError(f"{self.name} was never started")
        return self._popen

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def pgid(self) -> int:
        # start_new_session makes the child the leader of its own group.
        return self.popen.pid

    @property
    def returncode(self) -> int | None:
        """Exit status once the leader has ended (reaps it), else None."""
        return self.popen.poll()

    def is_alive(self) -> bool:
        """True while the group leader runs (does not reap it)."""
        return self._popen is not None and not self._leader_exited()

    def _leader_exited(self) -> bool:
        popen = self.popen
        if popen.returncode is not None:
            return True
        try:
            # WNOWAIT leaves a dead leader unreaped, so its pid keeps naming our group.
            info = os.waitid(os.P_PID, popen.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True
        return info is not None

    def _signal_group(self, signum: int) -> None:
        # Signal the group only while it provably is ours: its leader is unreaped, or members
        # remain (a pgid in use is never handed to another process).
        if self.popen.returncode is not None and not _group_members(self.pgid):
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pgid, signum)

    def send_signal(self, signum: int) -> None:
        """Send ``signum`` to the whole process group."""
        self._signal_group(signum)

    def wait(self, timeout: float) -> int:
        """Wait for the leader to exit; returns its exit status."""
        try:
            return self.popen.wait(timeout=scaled(timeout))
        except subprocess.TimeoutExpired as err:
            raise ProcessTimeout(f"{self.name} still running after {err.timeout:.1f}s") from err

    def terminate(self, timeout: float = 5.0) -> int | None:
        """SIGTERM the group, wait up to ``timeout``, then SIGKILL what is left."""
        if self._popen is None:
            return None
        deadline = time.monotonic() + scaled(timeout)
        self._signal_group(signal.SIGTERM)
        while time.monotonic() < deadline:
            if self._leader_exited() and not self._stragglers():
                break
            time.sleep(POLL_INTERVAL_S)
        self._signal_group(signal.SIGKILL)
        return self._reap()

    def kill(self) -> int | None:
        """SIGKILL the whole group at once."""
        if self._popen is None:
            return None
        self._signal_group(signal.SIGKILL)
        return self._reap()

    def _stragglers(self) -> list[int]:
        return [pid for pid in _group_members(self.pgid) if pid != self.pid]

    def _reap(self) -> int | None:
        try:
            return self.popen.wait(timeout=scaled(5.0))
        except subprocess.TimeoutExpired:
            return None

    # -- readiness ---------------------------------------------------------------------------

    def log_text(self) -> str:
        """Everything the process printed so far."""
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, chars: int = _TAIL_CHARS) -> str:
        return self.log_text()[-chars:]

    def _match_line(self, pattern: re.Pattern[str]) -> re.Match[str] | None:
        for line in self.log_text().splitlines():
            match = pattern.search(line)
            if match:
                return match
        return None

    def not_ready(self, what: str, waited: float) -> Exception:
        if self._leader_exited():
            return ProcessExited(
                f"{self.name} exited (status {self.returncode}) before {what}; "
                f"log {self.log_path}:\n{self.log_tail()}"
            )
        return ProcessTimeout(
            f"{self.name}: no {what} within {waited:.1f}s; log {self.log_path}:\n{self.log_tail()}"
        )

    def wait_for_line(self, pattern: str | re.Pattern[str], timeout: float) -> re.Match[str]:
        """Wait until a line of the log matches ``pattern`` (``re.search``)."""
        regex = re.compile(pattern) if isinstance(pattern, str) else pattern
        limit = scaled(timeout)
        deadline = time.monotonic() + limit
        while True:
            match = self._match_line(regex)
            if match:
                return match
            if self._leader_exited() or time.monotonic() >= deadline:
                # One last read: the line may have landed just before the exit.
                match = self._match_line(regex)
                if match:
                    return match
                raise self.not_ready(f"line matching {regex.pattern!r}", limit)
            time.sleep(POLL_INTERVAL_S)

    def wait_for_port(self, port: int, timeout: float, host: str = "127.0.0.1") -> None:
        """Wait until ``host:port`` accepts a TCP connection."""
        limit = scaled(timeout)
        deadline = time.monotonic() + limit
        while not port_is_open(port, host):
            if self._leader_exited() or time.monotonic() >= deadline:
                raise self.not_ready(f"listener on {host}:{port}", limit)
            time.sleep(POLL_INTERVAL_S)

    async def wait_for_line_async(
        self, pattern: str | re.Pattern[str], timeout: float
    ) -> re.Match[str]:
        """``wait_for_line`` that keeps the event loop running."""
        regex = re.compile(pattern) if isinstance(pattern, str) else pattern
        limit = scaled(timeout)
        deadline = time.monotonic() + limit
        while True:
            match = self._match_line(regex)
            if match:
                return match
            if self._leader_exited() or time.monotonic() >= deadline:
                match = self._match_line(regex)
                if match:
                    return match
                raise self.not_ready(f"line matching {regex.pattern!r}", limit)
            await asyncio.sleep(POLL_INTERVAL_S)

    async def wait_for_port_async(self, port: int, timeout: float, host: str = "127.0.0.1") -> None:
        """``wait_for_port`` that keeps the event loop running."""
        limit = scaled(timeout)
        deadline = time.monotonic() + limit
        while not await asyncio.to_thread(port_is_open, port, host):
            if self._leader_exited() or time.monotonic() >= deadline:
                raise self.not_ready(f"listener on {host}:{port}", limit)
            await asyncio.sleep(POLL_INTERVAL_S)


class ProcessFactory(Protocol):
    """Signature of the ``process_factory`` fixture."""

    def __call__(
        self,
        argv: Sequence[str],
        *,
        name: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: Path | str | None = None,
        inherit_env: bool = True,
    ) -> ManagedProcess: ...


class ProcessTracker:
    """Starts managed processes for one test and cleans up the ones still running."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.processes: list[ManagedProcess] = []

    def start(
        self,
        argv: Sequence[str],
        *,
        name: str | None = None,
        env: Mapping[str, str] | None = None,
        cwd: Path | str | None = None,
        inherit_env: bool = True,
    ) -> ManagedProcess:
        """Start ``argv``; ``env`` is added to the test's environment unless not inherited."""
        label = re.sub(r"[^A-Za-z0-9_.-]", "_", name or Path(str(argv[0])).name)
        log_path = self.log_dir / f"{len(self.processes):02d}-{label}.log"
        full_env = {**os.environ, **(env or {})} if inherit_env else dict(env or {})
        process = ManagedProcess(argv, log_path, env=full_env, cwd=cwd, name=label)
        self.processes.append(process)
        return process.start()

    def cleanup(self, timeout: float = 20.0) -> list[ManagedProcess]:
        """Terminate every started process (newest first); returns those that were running.

        A relay stops its desktops on SIGTERM (``--stop-desktops-on-exit``): on a loaded machine
        that takes seconds, and a SIGKILL before it ends would leave them running."""
        left = []
        for process in reversed(self.processes):
            if process.is_alive() or _group_members(process.pgid):
                left.append(process)
                process.terminate(timeout)
            else:
                process.kill()  # reaps the leader; the group is empty
        return left
