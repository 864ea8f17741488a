"""A private DevTools channel for every Chromium-based browser the relay starts in a desktop.

The browser gets ``--remote-debugging-pipe``: it reads DevTools commands on its fd 3 and writes
on its fd 4. The other ends of the two pipes go to the browser's holder (``holder.py``), a small
process of the relay's user, which serves them on a Unix socket in the relay's private state
directory (0700, the relay's user's): no TCP port, and no socket any other account can open
(docs/security.md, "The desktop's browser"). A flag that would open a port as well is removed
from the command. The holder outlives a relay restart (Chromium quits when its pipe closes);
it exits with the browser.
"""

from __future__ import annotations

import fcntl
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Final, Protocol, TypeVar

from relay.browser.holder import CODE

logger = logging.getLogger(__name__)

HOLDER_NAME: Final = "devtools"
# Under the relay's state directory: one socket per browser, named by its pid.
SOCKET_DIR: Final = "devtools"
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
Hold = Callable[[list[str], tuple[int, ...]], object]


def is_browser(argv: Sequence[str]) -> bool:
    """Whether ``argv`` starts a Chromium-based browser."""
    return bool(argv) and Path(argv[0]).name in BROWSERS


def private_argv(argv: Sequence[str]) -> list[str]:
    """The browser's command with the pipe flag and without any other DevTools endpoint."""
    words = [argv[0], PIPE_FLAG]
    words.extend(w for w in argv[1:] if not w.startswith(REFUSED_FLAGS))
    return words


def socket_path(state_dir: Path, pid: int) -> Path:
    """Where the holder of the browser led by ``pid`` serves its pipe."""
    return state_dir / SOCKET_DIR / f"{pid}.sock"


def _high(fd: int) -> int:
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, _HIGH_FD)
    os.close(fd)
    return moved


def spawn_with_devtools(argv: Sequence[str], spawn: Spawn[C], hold: Hold, state_dir: Path) -> C:
    """Start ``argv`` through ``spawn(argv, pass_fds)``; a browser gets a private DevTools
    pipe whose other ends go to a holder started through ``hold(argv, pass_fds)`` as the
    relay's user."""
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
    path = socket_path(state_dir, child.pid)
    try:
        path.parent.mkdir(mode=0o700, exist_ok=True)
        os.chmod(path.parent, 0o700)
        holder = [sys.executable, "-I", "-c", CODE, str(path), str(answers_r), str(commands_w)]
        hold(holder, (answers_r, commands_w))
    except OSError:
        # Without its holder the pipe closes with this process: the browser would quit then.
        logger.exception("the DevTools holder of pid %d did not start", child.pid)
    finally:
        os.close(answers_r)
        os.close(commands_w)
    return child
