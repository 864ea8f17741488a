"""Who a desktop's session runs as, and the home directories it gets.

A relay that runs as root never runs a desktop's session as root: the window manager, panel,
apps, the session D-Bus and the sound server run as the unprivileged desktop user
(``RELAYDESK_DESKTOP_USER``, created on first use when missing). Xvfb, x11vnc, websockify and
the orphan guard stay with the relay: they hold the desktop's secrets (docs/desktops.md,
"Desktop user"). A relay that is not root runs desktops as itself.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from relay.desktops.credentials import PRIVATE_DIR_MODE
from wire.errors import ErrorCode, OpError

logger = logging.getLogger(__name__)

DEFAULT_DESKTOP_USER: Final = "relaydesk-desktop"
USERADD: Final = "useradd"
USERADD_LOCK: Final = Path("/run/relaydesk/useradd.lock")
# A parent the desktop user may traverse but not list.
TRAVERSE_ONLY_MODE: Final = 0o711
# Parent of a root relay's sessions' temporary directories (their TMPDIR): a short path, since
# programs make Unix sockets there (Chromium's singleton socket), where no user can make names.
ROOT_TMP_DIR: Final = Path("/var/lib/relaydesk/tmp")
# A relay's homes: traversable by its desktop user's group only.
GATE_MODE: Final = 0o710


@dataclass(frozen=True)
class DesktopUser:
    """The account a desktop's session processes run as (never uid 0)."""

    name: str
    uid: int
    gid: int
    home: Path

    def popen_kwargs(self) -> dict[str, Any]:
        """``subprocess.Popen`` arguments that drop to this user (no supplementary groups)."""
        return {"user": self.uid, "group": self.gid, "extra_groups": []}

    def env(self) -> dict[str, str]:
        return {"USER": self.name, "LOGNAME": self.name, "SHELL": "/bin/bash"}


def resolve_desktop_user(name: str, *, create: bool = True) -> DesktopUser | None:
    """The desktop user when this process is root (created when missing), else None (blocking)."""
    if os.geteuid() != 0:
        return None
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        if not create:
            raise _unavailable(f"the desktop user {name!r} does not exist") from None
        entry = _create_user(name)
    if entry.pw_uid == 0:
        raise _unavailable(f"the desktop user {name!r} is root; desktops never run as root")
    return DesktopUser(name, entry.pw_uid, entry.pw_gid, Path(entry.pw_dir))


def _create_user(name: str) -> pwd.struct_passwd:
    """``useradd`` one account; relays that create accounts at once take turns (``useradd``
    refuses to run while another holds the account files)."""
    USERADD_LOCK.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(USERADD_LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            return pwd.getpwnam(name)  # another relay created it meanwhile
        except KeyError:
            return _useradd(name)
    finally:
        os.close(fd)


def _useradd(name: str) -> pwd.struct_passwd:
    home = Path("/var/lib") / name
    argv = [
        USERADD,
        "--system",
        "--user-group",
        "--create-home",
        "--home-dir",
        str(home),
        "--shell",
        "/bin/bash",
        "--comment",
        "relaydesk desktops",
        name,
    ]
    if shutil.which(USERADD) is None:
        raise _unavailable(f"cannot create the desktop user {name!r}: no {USERADD}")
    try:
        subprocess.run(argv, check=True, capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as err:
        raise _unavailable(f"cannot create the desktop user {name!r}: {err}") from err
    home.chmod(PRIVATE_DIR_MODE)
    logger.info("created the desktop user %s", name)
    return pwd.getpwnam(name)


def _unavailable(message: str) -> OpError:
    return OpError(ErrorCode.UNAVAILABLE, message, {"field": "desktop_user"})


ROOT_HOMES_DIR: Final = Path("/var/lib/relaydesk/desktop-homes")


def homes_root(state_dir: Path, configured: Path | None, user: DesktopUser | None) -> Path:
    """Where this relay keeps its desktops' homes.

    Beside the relay's state when desktops run as the relay. When they run as the desktop user,
    in a root-owned tree it may traverse but not list or change (the relay's state directory,
    often under root's home, is out of its reach), keyed by the relay's state directory so two
    relays never share homes.
    """
    if configured is not None:
        return configured
    if user is None:
        return state_dir / "homes"
    key = hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:12]
    return ROOT_HOMES_DIR / key


def prepare_home(path: Path, user: DesktopUser | None, *, fresh: bool) -> Path:
    """A 0700 home directory owned by the desktop user; ``fresh`` empties it first (blocking).

    Its parents stay the relay's: 0700, or 0711 (traverse only) when a desktop user must reach
    the home, so that user can never swap a parent for a link.
    """
    if fresh:
        shutil.rmtree(path, ignore_errors=True)
    _parent_dirs(path.parent, TRAVERSE_ONLY_MODE if user is not None else PRIVATE_DIR_MODE)
    path.mkdir(mode=PRIVATE_DIR_MODE, exist_ok=True)
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode):
        raise OSError(f"{path.name}: not a directory")
    if user is not None and (info.st_uid, info.st_gid) != (user.uid, user.gid):
        os.chown(path, user.uid, user.gid, follow_symlinks=False)
    path.chmod(PRIVATE_DIR_MODE)
    return path


def _parent_dirs(path: Path, mode: int) -> None:
    missing = [p for p in (path, *path.parents) if not p.exists()]
    for directory in reversed(missing):
        try:
            directory.mkdir(mode=mode)
        except FileExistsError:
            continue  # made by a start beside this one (the pool fills while a start runs)
        directory.chmod(mode)
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        raise OSError(f"{path.name}: not a directory of the relay's")
    if stat.S_IMODE(info.st_mode) != mode:
        path.chmod(mode)


def write_in_home(home: Path, relative: str, data: bytes, user: DesktopUser | None) -> None:
    """Replace ``home/relative`` with a 0600 file of the desktop user's (blocking).

    The home belongs to the desktop user, so every step is opened without following links
    (``openat`` with ``O_NOFOLLOW``): a link planted in a kept home never redirects the relay.
    """
    *parents, name = relative.split("/")
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    fd = os.open(home, flags)
    try:
        for part in parents:
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, PRIVATE_DIR_MODE, dir_fd=fd)
                if user is not None:
                    os.chown(part, user.uid, user.gid, dir_fd=fd, follow_symlinks=False)
            child = os.open(part, flags, dir_fd=fd)
            os.close(fd)
            fd = child
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=fd)
        out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=fd)
        try:
            if user is not None:
                os.fchown(out, user.uid, user.gid)
            os.write(out, data)
        finally:
            os.close(out)
    finally:
        os.close(fd)


def session_tmp_root() -> Path:
    """Parent of the sessions' TMPDIRs: a root relay's own, or the host's temporary directory
    for a relay that runs desktops as itself."""
    if os.geteuid() == 0:
        return ROOT_TMP_DIR
    return Path(tempfile.gettempdir()) / f"relaydesk-tmp-{os.getuid()}"


def session_tmp(relay: str, desktop_session_id: str) -> Path:
    """The TMPDIR of one desktop's session (``relay``: the relay's key)."""
    return session_tmp_root() / relay[:8] / desktop_session_id[:12]


def make_session_tmp(path: Path, user: DesktopUser | None) -> None:
    """A new, empty 0700 directory of the desktop user's at ``path``, whose parents are the
    relay's and only traversable (blocking). The host's temporary directory is everyone's,
    so each parent is checked to be a directory of the relay's, never a link."""
    mode = TRAVERSE_ONLY_MODE if user is not None else PRIVATE_DIR_MODE
    path.parent.parent.parent.mkdir(mode=TRAVERSE_ONLY_MODE, parents=True, exist_ok=True)
    for parent in (path.parent.parent, path.parent):
        with contextlib.suppress(FileExistsError):
            parent.mkdir(mode=mode)
        info = parent.lstat()
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
            raise OSError(f"{parent}: not a directory of the relay's")
        if stat.S_IMODE(info.st_mode) != mode:
            parent.chmod(mode)
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(mode=PRIVATE_DIR_MODE)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        if user is not None:
            os.fchown(fd, user.uid, user.gid)
        os.fchmod(fd, PRIVATE_DIR_MODE)
    finally:
        os.close(fd)


def directory_size(path: Path) -> int:
    """Bytes of the regular files under ``path`` (blocking). Walked through descriptors: a
    directory the desktop user swaps for a link while it is measured is never entered."""
    total = 0
    for _root, _dirs, files, dir_fd in os.fwalk(path, follow_symlinks=False):
        for name in files:
            with contextlib.suppress(OSError):
                info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                if stat.S_ISREG(info.st_mode):
                    total += info.st_size
    return total


def kill_all_processes_of(user: DesktopUser) -> None:
    """SIGKILL every process of ``user`` (blocking): a child that drops to it calls
    ``kill(-1, SIGKILL)``, which the kernel applies at once to every process it may signal
    (all of that uid's but itself), so none can fork away from it. Only for an account that
    this relay holds alone (relay/desktops/leases.py), once none of its desktops runs."""
    try:
        subprocess.run(
            ["/bin/sh", "-c", "kill -9 -1"],
            env={"PATH": "/usr/bin:/bin"},
            cwd="/",
            capture_output=True,
            timeout=10,
            check=False,
            **user.popen_kwargs(),
        )
    except (OSError, subprocess.SubprocessError) as err:
        logger.error("processes of %s not killed: %s", user.name, err)


def gate_homes_root(root: Path, user: DesktopUser) -> None:
    """Make ``root`` (this relay's homes) root's, group ``user``'s, 0710: only this relay's
    desktop user may traverse it. Sibling trees of other relays that still name this group
    (an account that relay held before) become root's alone: they stay unreachable to the
    desktops of whoever holds the account now (blocking)."""
    _parent_dirs(root.parent, TRAVERSE_ONLY_MODE)
    with contextlib.suppress(FileExistsError):
        root.mkdir(mode=GATE_MODE)
    info = root.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != 0:
        raise OSError(f"{root.name}: not a directory of the relay's")
    os.chown(root, 0, user.gid, follow_symlinks=False)
    root.chmod(GATE_MODE)
    if root.parent != ROOT_HOMES_DIR:
        return
    for other in root.parent.iterdir():
        with contextlib.suppress(OSError):
            found = other.lstat()
            if other.name != root.name and stat.S_ISDIR(found.st_mode) and found.st_gid == user.gid:
                os.chown(other, 0, 0, follow_symlinks=False)
                logger.info("homes of an earlier holder of %s made unreachable", user.name)


def hand_home_to_root(home: Path) -> None:
    """A kept home no desktop uses: its top directory root's, 0700 (blocking)."""
    with contextlib.suppress(FileNotFoundError):
        fd = os.open(home, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            os.fchown(fd, 0, 0)
            os.fchmod(fd, PRIVATE_DIR_MODE)
        finally:
            os.close(fd)


def reown_home(home: Path, user: DesktopUser, earlier: frozenset[int]) -> int:
    """Give ``user`` what the ``earlier`` desktop accounts own in ``home`` (a kept home made
    by another account); the top directory must be root's 0700 meanwhile, so no process of
    either account can reach inside. Links are never followed; returns entries changed."""
    changed = 0
    for _dir, subdirs, files, dir_fd in os.fwalk(home, follow_symlinks=False):
        for name in (*subdirs, *files):
            with contextlib.suppress(OSError):
                info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                if info.st_uid in earlier:
                    os.chown(name, user.uid, user.gid, dir_fd=dir_fd, follow_symlinks=False)
                    changed += 1
    return changed
