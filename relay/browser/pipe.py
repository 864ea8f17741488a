"""A private DevTools channel for every Chromium-based browser the relay starts in a desktop.

The browser gets ``--remote-debugging-pipe``: it reads DevTools commands on its fd 3 and writes
on its fd 4, two pipes whose other ends only the relay's process holds. No TCP port, no socket
file: nothing another local user or another desktop could connect to (docs/security.md,
"The desktop's browser"). A flag that would open a port as well is removed from the command.

The relay's ends are kept here, by the pid of the process that leads the browser's group
(the same pid from the held start through the browser's own ``exec``); they close when the
browser exits. Pipes do not survive the relay's process: a browser re-adopted after a relay
restart has no channel until it is started again.
"""

from __future__ import annotations

import asyncio
import fcntl
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final, Protocol, TypeVar

from relay.browser.cdp import CdpConnection

logger = logging.getLogger(__name__)

PIPE_FLAG: Final = "--remote-debugging-pipe"
# Browsers (not Electron apps: their windows are apps of their own) whose DevTools we hold.
BROWSERS: Final = frozenset(
    {
        "chromium",
        "chromium-browser",
        "google-chrome",
        "google-chrome-stable",
        "chrome",
        "brave-browser",
        "microsoft-edge",
    }
)
# Flags that would open a DevTools endpoint others could reach, or move the pipe.
REFUSED_FLAGS: Final = (
    "--remote-debugging-port",
    "--remote-debugging-address",
    "--remote-debugging-socket-name",
    "--remote-debugging-pipe",
)
# Above the descriptors a shell or the browser might use: the wrapper moves them to 3 and 4.
_HIGH_FD: Final = 32
# Moves the pipe ends to fds 3 and 4, closes the originals, then runs the browser.
_WRAPPER: Final = 'exec "$@" 3<&{r} 4>&{w} {r}<&- {w}>&-'
_WRAPPER_NAME: Final = "relaydesk-devtools"
# dash redirects only descriptors 0-9; bash any.
SHELL: Final = "/bin/bash"


class Started(Protocol):
    @property
    def pid(self) -> int: ...


C = TypeVar("C", bound=Started)
Spawn = Callable[[list[str], tuple[int, ...]], C]

# The relay's ends of every browser's pipe, by the pid leading the browser's group.
_held: dict[int, CdpConnection] = {}


def is_browser(argv: Sequence[str]) -> bool:
    """Whether ``argv`` starts a Chromium-based browser."""
    return bool(argv) and Path(argv[0]).name in BROWSERS


def private_argv(argv: Sequence[str]) -> list[str]:
    """The browser's command with the pipe flag and without any other DevTools endpoint."""
    words = [argv[0], PIPE_FLAG]
    words.extend(w for w in argv[1:] if not w.startswith(REFUSED_FLAGS))
    return words


def _high(fd: int) -> int:
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, _HIGH_FD)
    os.close(fd)
    return moved


def spawn_with_devtools(argv: Sequence[str], spawn: Spawn[C]) -> C:
    """Start ``argv`` through ``spawn(argv, pass_fds)``; a browser gets a private DevTools pipe
    whose relay ends are kept for its pid (``connection``)."""
    if not is_browser(argv):
        return spawn(list(argv), ())
    commands_r, commands_w = (_high(fd) for fd in os.pipe())  # relay → browser (its fd 3)
    answers_r, answers_w = (_high(fd) for fd in os.pipe())  # browser → relay (its fd 4)
    wrapper = _WRAPPER.format(r=commands_r, w=answers_w)
    words = [SHELL, "-c", wrapper, _WRAPPER_NAME, *private_argv(argv)]
    try:
        child = spawn(words, (commands_r, answers_w))
    except BaseException:
        os.close(commands_w)
        os.close(answers_r)
        raise
    finally:
        os.close(commands_r)  # the browser's ends are the browser's alone now
        os.close(answers_w)
    pid = child.pid
    connection = CdpConnection(answers_r, commands_w)
    _held[pid] = connection
    task = asyncio.get_running_loop().create_task(_open(pid, connection))
    _opening.add(task)
    task.add_done_callback(_opening.discard)
    return child


_opening: set[asyncio.Task[None]] = set()


async def _open(pid: int, connection: CdpConnection) -> None:
    try:
        await connection.open()
    except OSError:
        logger.exception("the DevTools pipe of pid %d could not be opened", pid)
        connection.close()


def connection(pids: Sequence[int]) -> CdpConnection | None:
    """The open DevTools connection of the first of ``pids`` that has one; closed ones are
    forgotten."""
    for pid, held in list(_held.items()):
        if held.closed:
            del _held[pid]
    return next((_held[p] for p in pids if p in _held), None)


def close_all() -> None:
    """Close every pipe (the relay is shutting down)."""
    for held in _held.values():
        held.close()
    _held.clear()
