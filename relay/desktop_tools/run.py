"""One command in a desktop: run as the desktop's user with its environment, in its own
process group joined to the desktop's (it stops with the desktop), standard input from the
given bytes or ``/dev/null``, each output stream kept up to a cap, the whole group killed at
the time limit or when the caller gives up.

The command starts *held*, like the desktop's own children (relay/desktops/process.py): a
shell waits for one line on its standard input, a pipe the relay writes only once the process
has joined the desktop — moved into the desktop's cgroup — and then replaces itself with the
command. So nothing the command forks, a ``setsid`` program included, ever runs outside the
desktop's cgroup: it dies with the desktop's stop. A relay gone before leaves the pipe without
a writer; the shell reads end-of-file and the command never runs."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Final

from relay.desktop_tools.session import DesktopSession
from relay.desktops.process import working_directory
from wire.errors import ErrorCode, OpError

# After the command exits, how long its output may still arrive: a job it left in the
# background holds the pipes open, and its output is not waited for.
PIPE_GRACE_S: Final = 0.25
# Exit is watched through a pidfd; without one (old kernels) it is polled.
POLL_S: Final = 0.02
READ_CHUNK: Final = 64 * 1024
# What is kept of a server program's standard error.
MAX_ERRORS: Final = 4096
# The hold (see the module's docstring): ``{stdin}`` is ``/dev/null`` or the given bytes' file.
_HOLD: Final = 'read -r go || exit 0; exec "$@" <{stdin}'
_HOLD_NAME: Final = "relaydesk-held"
NO_INPUT: Final = "/dev/null"


@dataclass
class _Held:
    """A started command still waiting for :meth:`release`."""

    popen: subprocess.Popen[bytes]
    hold: int | None

    @property
    def pid(self) -> int:
        return self.popen.pid

    def release(self) -> None:
        """Let the command start (it is in the desktop's cgroup by now)."""
        fd, self.hold = self.hold, None
        if fd is not None:
            with contextlib.suppress(OSError):  # killed meanwhile
                os.write(fd, b"go\n")
            os.close(fd)

    def abandon(self) -> None:
        """Never start the command: the shell reads end-of-file and exits."""
        fd, self.hold = self.hold, None
        if fd is not None:
            os.close(fd)


@dataclass
class Capture:
    """One output stream, kept up to ``cap`` bytes (the rest is read and dropped)."""

    cap: int
    data: bytearray = field(default_factory=bytearray)
    cut: bool = False

    def take(self, chunk: bytes) -> None:
        room = self.cap - len(self.data)
        if len(chunk) > room:
            self.cut = True
        if room > 0:
            self.data += chunk[:room]

    def text(self) -> str:
        return bytes(self.data).decode("utf-8", "replace")


@dataclass(frozen=True)
class Completed:
    """How a command ended; ``returncode`` is None when it was killed at its time limit."""

    stdout: Capture
    stderr: Capture
    returncode: int | None
    timed_out: bool

    @property
    def truncated(self) -> bool:
        return self.stdout.cut or self.stderr.cut


async def run_in_desktop(
    session: DesktopSession,
    name: str,
    argv: Sequence[str],
    *,
    timeout_s: float,
    cap: int,
    stdin: bytes | None = None,
) -> Completed:
    """Run ``argv`` in the desktop (see the module's docstring)."""
    # Started in the loop's thread (fork and exec take milliseconds), so no cancellation can
    # fall between the start and the tracking of the group.
    held = _spawn(session, argv, stdin)
    popen = held.popen
    try:
        child = await session.track(name, popen.pid)
    except BaseException:
        held.abandon()
        _kill_group(popen.pid)
        _close(popen)
        await _exited(popen)
        raise
    held.release()
    out, err = Capture(cap), Capture(cap)
    readers = [
        asyncio.create_task(_drain(popen.stdout, out)),
        asyncio.create_task(_drain(popen.stderr, err)),
    ]
    try:
        returncode: int | None
        try:
            async with asyncio.timeout(timeout_s):
                returncode = await _exited(popen)
        except TimeoutError:
            _kill_group(popen.pid)
            returncode = None
        await asyncio.wait(readers, timeout=PIPE_GRACE_S)
        return Completed(out, err, returncode, returncode is None)
    finally:
        for reader in readers:
            reader.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
        if popen.poll() is None:  # cancelled: the caller gave up
            _kill_group(popen.pid)
        _close(popen)
        await _exited(popen)
        session.forget(child)


async def start_server_in_desktop(
    session: DesktopSession, name: str, argv: Sequence[str], *, stdin: bytes, timeout_s: float
) -> tuple[int | None, str]:
    """Run a program that forks a server into the background (``xclip``): wait until its
    first process exits, and answer its exit status (None: killed at the time limit) and
    what it wrote to standard error. The server lives on in the process group, joined to the
    desktop's; its output goes nowhere, so nothing waits for it."""
    with tempfile.TemporaryFile() as errors:
        held = _spawn(session, argv, stdin, subprocess.DEVNULL, errors)
        popen = held.popen
        try:
            await session.track(name, popen.pid)
            held.release()
            async with asyncio.timeout(timeout_s):
                returncode: int | None = await _exited(popen)
        except TimeoutError:
            _kill_group(popen.pid)
            returncode = None
        finally:
            held.abandon()
            if popen.poll() is None:  # cancelled, or killed above
                _kill_group(popen.pid)
            await _exited(popen)
        errors.seek(0)
        return returncode, errors.read(MAX_ERRORS).decode("utf-8", "replace")


def _spawn(
    session: DesktopSession,
    argv: Sequence[str],
    stdin: bytes | None,
    stdout: IO[bytes] | int = subprocess.PIPE,
    stderr: IO[bytes] | int = subprocess.PIPE,
) -> _Held:
    """Start ``argv`` held (blocking); its standard input is a private temporary file holding
    ``stdin``, so no pipe can stall on a command that does not read it. The file is handed to
    the desktop's user by descriptor and reopened by the shell through ``/proc/self/fd``."""
    program = _executable(argv[0], session.env)
    source: IO[bytes] | None = None
    if stdin is not None:
        source = tempfile.TemporaryFile()  # noqa: SIM115 - closed below, once the child has it
        source.write(stdin)
        source.flush()
        if session.user is not None:
            os.fchown(source.fileno(), session.user.uid, session.user.gid)
    path = NO_INPUT if source is None else f"/proc/self/fd/{source.fileno()}"
    hold_read, hold_write = os.pipe()
    user = session.user.popen_kwargs() if session.user is not None else {}
    try:
        popen = subprocess.Popen(
            ["/bin/sh", "-c", _HOLD.format(stdin=path), _HOLD_NAME, program, *argv[1:]],
            cwd=working_directory(session.env),
            env=dict(session.env),
            stdin=hold_read,
            stdout=stdout,
            stderr=stderr,
            pass_fds=() if source is None else (source.fileno(),),
            start_new_session=True,
            close_fds=True,
            **user,
        )
    except OSError as err:
        os.close(hold_write)
        raise OpError(
            ErrorCode.UNAVAILABLE, f"cannot run {argv[0]}: {err.strerror or err}"
        ) from err
    finally:
        os.close(hold_read)
        if source is not None:
            source.close()
    return _Held(popen, hold_write)


def _executable(program: str, env: Mapping[str, str]) -> str:
    """``program`` resolved on the desktop's ``PATH`` as the exec would be."""
    found = shutil.which(program, path=env.get("PATH", os.defpath))
    if found is None:
        raise OpError(ErrorCode.UNAVAILABLE, f"cannot run {program}: No such file or directory")
    return found


async def _drain(pipe: IO[bytes] | None, capture: Capture) -> None:
    if pipe is None:
        return
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=READ_CHUNK)
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
    try:
        while chunk := await reader.read(READ_CHUNK):
            capture.take(chunk)
    finally:
        transport.close()


async def _exited(popen: subprocess.Popen[bytes]) -> int:
    """The exit status, once the process has exited (not waiting for its pipes)."""
    if (code := popen.poll()) is not None:
        return code
    try:
        pidfd = os.pidfd_open(popen.pid)
    except (AttributeError, OSError):
        while True:
            if (code := popen.poll()) is not None:
                return code
            await asyncio.sleep(POLL_S)
    loop = asyncio.get_running_loop()
    exited: asyncio.Future[None] = loop.create_future()

    def readable() -> None:
        if not exited.done():
            exited.set_result(None)

    loop.add_reader(pidfd, readable)
    try:
        await exited
    finally:
        loop.remove_reader(pidfd)
        os.close(pidfd)
    return popen.wait()


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _close(popen: subprocess.Popen[bytes]) -> None:
    for pipe in (popen.stdout, popen.stderr):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()
