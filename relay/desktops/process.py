"""One supervised child process and the process group it leads.

Every desktop child is started with ``start_new_session=True``: it leads its own session and
process group, so a relay restart (which kills the relay's own group) leaves it running, and
killing the group also takes the grandchildren it spawned (an xterm's shell, websockify's
per-connection workers). A desktop is the set of these groups; see ``DesktopProcesses``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import logging
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TypeVar

import psutil

if TYPE_CHECKING:
    from relay.desktops.user import DesktopUser

logger = logging.getLogger(__name__)

T = TypeVar("T")

# A group is polled while it shuts down; short enough to keep stop() fast, long enough
# to stay cheap.
_POLL_S = 0.01
_CREATE_TIME_TOLERANCE_S = 0.05
_SYSV_SHM = Path("/proc/sysvipc/shm")
_IPC_RMID = 0


def _reap(pid: int) -> None:
    """Collect a zombie child so its pid (and group) can disappear."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def group_exists(pgid: int) -> bool:
    """True while a process of group ``pgid`` runs.

    A member that has exited and waits to be collected (a zombie) no longer counts: it runs
    nothing and holds nothing but its pid. The members a desktop's programs leave behind are
    collected by the host's init (their parents are gone), which some hosts do only every second
    or so; a stop that waited for them waited that long (docs/desktops.md, "Stop")."""
    _reap(pgid)
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return _runs_in_group(pgid)


def _stat_fields(pid: str) -> list[str] | None:
    """``/proc/<pid>/stat`` from its state on (the name before it may hold spaces)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    return raw[raw.rfind(b")") + 2 :].decode("ascii", "replace").split()


def _runs(pid: str, fields: list[str]) -> bool:
    """Whether the process ``pid`` (its stat ``fields``) runs. A process whose first thread
    has ended shows that thread's state, ``Z``, while its other threads still run (Firefox
    shutting down): it is a zombie only once it has no other thread."""
    if fields[0] != "Z":
        return True
    try:
        return len(os.listdir(f"/proc/{pid}/task")) > 1
    except OSError:
        return False


def _runs_in_group(pgid: int) -> bool:
    """Whether a process of group ``pgid`` that is not a zombie remains (read from /proc)."""
    leader = str(pgid)
    fields = _stat_fields(leader)  # the leader, most often the one still running
    if fields is not None and fields[2] == leader and _runs(leader, fields):
        return True
    try:
        pids = [entry for entry in os.listdir("/proc") if entry.isdigit()]
    except OSError:
        return True
    for pid in pids:
        fields = _stat_fields(pid)
        if fields is not None and fields[2] == leader and _runs(pid, fields):
            return True
    return False


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def release_shared_memory(creators: set[int]) -> int:
    """Remove SysV shared memory segments left behind by ``creators`` once nobody attaches.

    x11vnc polls the screen through MIT-SHM segments and frees them only on a clean exit; a
    killed or crashed x11vnc would leak one framebuffer-sized segment per tile row until the
    host runs out (shmget: No space left on device).
    """
    try:
        rows = _SYSV_SHM.read_text(encoding="ascii").splitlines()
    except OSError:
        return 0
    header = rows[0].split() if rows else []
    removed = 0
    for row in rows[1:]:
        seg = dict(zip(header, row.split(), strict=False))
        if int(seg.get("cpid", -1)) in creators and seg.get("nattch") == "0":
            removed += _shm_remove(int(seg["shmid"]))
    return removed


def _shm_remove(shmid: int) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    return 1 if libc.shmctl(shmid, _IPC_RMID, None) == 0 else 0


def pid_create_time(pid: int) -> float | None:
    """The kernel's start time of ``pid``, or ``None`` when it is gone or a zombie."""
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return proc.create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


# A held child is a shell that waits for one line on its standard input, then replaces itself
# with the program (same pid, same start time, same process group). The relay writes that line
# once the child is recorded in the state file; a relay killed before leaves the pipe without
# a writer, the shell reads end-of-file and exits, and the program never runs unrecorded.
_HOLD = ("/bin/sh", "-c", 'read -r go || exit 0; exec "$@" </dev/null', "relaydesk-held")


def _executable(program: str, env: Mapping[str, str]) -> str:
    """``program`` resolved on ``env``'s ``PATH`` as the exec would; ``FileNotFoundError``
    (what a direct spawn raises) when there is none."""
    found = shutil.which(program, path=env.get("PATH", os.defpath))
    if found is None:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), program)
    return found


def working_directory(env: Mapping[str, str]) -> str:
    """Where a desktop child starts: ``HOME`` when it is a directory, else ``/``."""
    home = env.get("HOME", "")
    return home if home and os.path.isdir(home) else "/"


@dataclass(eq=False)
class ChildProcess:
    """A child that leads its own process group; ``pgid == pid``."""

    name: str
    pid: int
    create_time: float
    essential: bool
    stop_signal: int = signal.SIGTERM
    _popen: subprocess.Popen[bytes] | None = field(default=None, repr=False)
    # A held child's end of its hold pipe (see ``spawn``); None once released.
    _hold: int | None = field(default=None, repr=False)

    @classmethod
    def spawn(
        cls,
        name: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str],
        essential: bool,
        pass_fds: Sequence[int] = (),
        output: IO[Any] | int = subprocess.DEVNULL,
        stop_signal: int = signal.SIGTERM,
        user: DesktopUser | None = None,
        held: bool = False,
    ) -> ChildProcess:
        """Start ``argv`` in a new session; raises ``OSError`` when it cannot be executed.

        It runs in ``env``'s ``HOME`` (``/`` without one): a terminal opens where a person
        expects it, and no desktop holds on to the directory the relay was started from.
        ``user``: run it as that (unprivileged) user instead of the relay's. ``held``: the
        program starts only once :meth:`release` is called (``DesktopProcesses.add`` does,
        after recording it); if this process dies first, it never starts (``_HOLD``).
        """
        hold_read, hold_write = os.pipe() if held else (None, None)
        if held:
            argv = [*_HOLD, _executable(argv[0], env), *argv[1:]]
        try:
            popen = subprocess.Popen(
                list(argv),
                cwd=working_directory(env),
                env=dict(env),
                stdin=subprocess.DEVNULL if hold_read is None else hold_read,
                stdout=output,
                stderr=output,
                pass_fds=tuple(pass_fds),
                start_new_session=True,
                close_fds=True,
                **(user.popen_kwargs() if user is not None else {}),
            )
        except BaseException:
            for fd in (hold_read, hold_write):
                if fd is not None:
                    os.close(fd)
            raise
        if hold_read is not None:
            os.close(hold_read)
        created = pid_create_time(popen.pid) or time.time()
        logger.debug("started %s pid=%d", name, popen.pid)
        return cls(name, popen.pid, created, essential, stop_signal, popen, hold_write)

    def release(self) -> None:
        """Let a held child's program start (no-op for one not held, or released)."""
        fd, self._hold = self._hold, None
        if fd is not None:
            with contextlib.suppress(OSError):  # it was stopped meanwhile
                os.write(fd, b"go\n")
            os.close(fd)

    @classmethod
    def adopt(
        cls, name: str, pid: int, create_time: float, essential: bool, stop_signal: int
    ) -> ChildProcess:
        """Wrap a process started by an earlier relay (it is not our child any more)."""
        return cls(name, pid, create_time, essential, stop_signal)

    @property
    def pgid(self) -> int:
        return self.pid

    def returncode(self) -> int | None:
        """Exit code when it is known (only for our own children)."""
        return None if self._popen is None else self._popen.poll()

    def is_alive(self) -> bool:
        """True while the leader runs and is still the process we started (no pid reuse)."""
        if self._popen is not None:
            return self._popen.poll() is None
        started = pid_create_time(self.pid)
        return started is not None and abs(started - self.create_time) < _CREATE_TIME_TOLERANCE_S

    def owns_group(self) -> bool:
        """True while the group is still this desktop's.

        Linux never reuses a pid while a group of that id exists, so a group whose leader has
        exited is still ours; a live leader with another start time means the id was reused.
        """
        if self.is_alive():
            return True
        if self._popen is None and pid_create_time(self.pid) is not None:
            return False
        return group_exists(self.pgid)

    def terminate(self) -> None:
        """Ask the whole group to exit (with this child's ``stop_signal``)."""
        if self.owns_group():
            _signal_group(self.pgid, signal.Signals(self.stop_signal))

    def kill(self) -> None:
        """Kill the whole group."""
        if self.owns_group():
            _signal_group(self.pgid, signal.SIGKILL)

    def group_gone(self) -> bool:
        if self._popen is not None:
            self._popen.poll()
        if group_exists(self.pgid):
            return False
        if self._popen is not None:
            # The leader may have exited since the poll above; it is a zombie until collected
            # here (``group_exists`` does not count zombies), with its exit status.
            self._popen.poll()
        return True

    def to_record(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "pid": self.pid,
            "pgid": self.pgid,
            "create_time": self.create_time,
            "essential": self.essential,
            "stop_signal": int(self.stop_signal),
        }


def adopt_children(records: list[dict[str, Any]]) -> list[ChildProcess]:
    """Children an earlier relay recorded (``ChildProcess.to_record``); raises KeyError,
    TypeError or ValueError for a malformed record, and for a pid <= 1."""
    children = [
        ChildProcess.adopt(
            str(p["name"]),
            int(p["pid"]),
            float(p["create_time"]),
            bool(p["essential"]),
            _stop_signal(p.get("stop_signal")),
        )
        for p in records
    ]
    if any(c.pid <= 1 for c in children):
        raise ValueError("implausible pid in state file")
    return children


def _stop_signal(value: object) -> int:
    allowed = {int(signal.SIGTERM), int(signal.SIGKILL), int(signal.SIGINT)}
    return value if isinstance(value, int) and value in allowed else int(signal.SIGTERM)


async def run_to_completion(awaitable: Awaitable[T]) -> T:
    """Await ``awaitable`` to its end even when the caller is cancelled meanwhile; the
    cancellation is raised once it has ended.

    For stops and clean-ups: a request cut short (the server's connection closing cancels what
    the relay was answering) must not leave a stop half done. Cut short after SIGKILLing x11vnc
    and before its segments are released, a stop leaks x11vnc's shared memory and the
    desktop's private directory. Unlike ``asyncio.shield`` alone, the caller (and the lock it
    holds) waits for the end.
    """
    task = asyncio.ensure_future(awaitable)
    cancelled = False
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.cancelled():
                raise
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError
    return task.result()


async def _wait_until(predicate: Any, timeout_s: float) -> bool:
    """Poll ``predicate`` until it holds or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(_POLL_S)
    return True


@dataclass
class DesktopProcesses:
    """Every process group of one desktop, stopped together in reverse start order.

    ``on_add`` is told of every child as soon as it is added (the starter records it in the
    state file at once, so a relay killed in the middle of a start leaves nothing unrecorded).
    """

    children: list[ChildProcess] = field(default_factory=list)
    on_add: Callable[[ChildProcess], None] | None = field(default=None, repr=False, compare=False)

    def add(self, child: ChildProcess) -> ChildProcess:
        """Add ``child``, tell ``on_add`` (which records it), then let a held child start."""
        self.children.append(child)
        try:
            if self.on_add is not None:
                self.on_add(child)
        finally:
            child.release()
        return child

    def find(self, name: str) -> ChildProcess | None:
        return next((c for c in self.children if c.name == name), None)

    def dead_essentials(self) -> list[str]:
        """Names of essential processes that are no longer running."""
        return [c.name for c in self.children if c.essential and not c.is_alive()]

    def failed_programs(self) -> list[str]:
        """The session's programs (not essential: the window manager, the profile's start
        programs and apps) that ended in failure: a non-zero exit status or a signal, each
        said as ``chromium exited with status 1``. A program that exited 0 (a person closed
        it) is not a failure."""
        return [
            exit_words(c.name.removeprefix("app:"), code)
            for c in self.children
            if not c.essential and (code := c.returncode()) is not None and code != 0
        ]

    def remaining_groups(self) -> list[int]:
        return [c.pgid for c in self.children if not c.group_gone()]

    async def stop(self, grace_s: float, kill_wait_s: float = 2.0) -> bool:
        """Signal every group, SIGKILL what is left after ``grace_s``; True when none remain."""
        live = [c for c in reversed(self.children) if c.owns_group()]
        for child in live:
            child.terminate()
        if await _wait_until(lambda: all(c.group_gone() for c in live), grace_s):
            self.release_shared_memory()
            return True
        for child in live:
            if not child.group_gone():
                logger.info(
                    "%s pid=%d did not end within %.1f s of SIGTERM; killing its group",
                    child.name,
                    child.pid,
                    grace_s,
                )
                _signal_group(child.pgid, signal.SIGKILL)
        gone = await _wait_until(lambda: all(c.group_gone() for c in live), kill_wait_s)
        if not gone:
            logger.error("process groups still present after SIGKILL: %s", self.remaining_groups())
        self.release_shared_memory()
        return gone

    def release_shared_memory(self) -> None:
        """Free SysV segments of children that are gone (see ``release_shared_memory``)."""
        dead = {c.pid for c in self.children if not c.is_alive()}
        if dead and (count := release_shared_memory(dead)):
            logger.debug("released %d shared memory segments", count)

    def to_records(self) -> list[dict[str, Any]]:
        return [c.to_record() for c in self.children]


def exit_words(name: str, code: int) -> str:
    """How a program ended, for people: ``x exited with status 1``, ``x was killed by SIGSEGV``."""
    if code < 0:
        try:
            return f"{name} was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"{name} was killed by signal {-code}"
    return f"{name} exited with status {code}"
