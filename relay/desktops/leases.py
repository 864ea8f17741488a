"""Which host account a relay's desktops run as: one account per relay, never shared.

A root relay takes a desktop user for its lifetime (docs/desktops.md, "Desktop user"): the one
``RELAYDESK_DESKTOP_USER`` names, or else one of a bounded pool (``relaydesk-desktop-1`` ..
``-N``, created with ``useradd`` on demand). The claim is a ``flock`` on a file per account in
a root-only directory (``/run/relaydesk/desktop-users``), held by the relay process; the file
names the relay (a key of its state directory), so a relay process that replaces another one
on the same state directory shares its predecessor's account while both run, and no other
relay can take it. A pool account is taken only when no process of it runs (an earlier relay's
desktops left for re-adoption keep theirs) unless it is the one this relay used last time,
which is remembered in the relay's state directory and tried first.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import logging
import os
import pwd
import stat
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import psutil

from relay.desktops.user import DEFAULT_DESKTOP_USER, DesktopUser, resolve_desktop_user
from wire.errors import ErrorCode, OpError

logger = logging.getLogger(__name__)

LOCK_DIR: Final = Path("/run/relaydesk/desktop-users")
POOL_PREFIX: Final = "relaydesk-desktop-"
REMEMBERED_NAME: Final = "desktop-user"
_KEY_BYTES: Final = 64


def relay_key(state_dir: Path) -> str:
    """A short name of one relay: its state directory's (homes, cgroups and leases use it)."""
    return hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:12]


@dataclass
class _Held:
    fd: int
    key: str
    count: int = 1


# Leases this process holds, by account name: two lifecycles of one relay in one process (a
# relay's successor in tests, a restart in place) share one.
_HELD: dict[str, _Held] = {}
_HELD_LOCK = threading.Lock()
# Accounts that desktops of another kind (containers) use right now, by who marked them.
_BUSY: dict[str, set[int]] = {}


def mark_busy(name: str, owner: int, busy: bool) -> None:
    """Say whether ``owner`` (the lifecycle of another kind) runs desktops as ``name``."""
    with _HELD_LOCK:
        owners = _BUSY.setdefault(name, set())
        if busy:
            owners.add(owner)
        else:
            owners.discard(owner)


def busy(name: str) -> bool:
    """Whether desktops of another kind run as ``name`` in this relay process."""
    with _HELD_LOCK:
        return bool(_BUSY.get(name))


@dataclass(frozen=True)
class UserLease:
    """This relay's claim on its desktop user; :meth:`release` once, at the relay's end."""

    user: DesktopUser
    key: str
    # The account this relay used before (None: none remembered, or the same one).
    previous: str | None = None

    def release(self) -> None:
        _release(self.user.name, self.key)


def taken_by_another(name: str, key: str) -> bool:
    """Whether a running relay other than ``key``'s holds the account ``name`` (blocking)."""
    if not _claim(name, key):
        return True
    _release(name, key)
    return False


def lease_configured(name: str, state_dir: Path) -> UserLease:
    """Claim the operator's ``RELAYDESK_DESKTOP_USER``; ``unavailable`` naming it when another
    relay holds it (blocking)."""
    key = relay_key(state_dir)
    if not _claim(name, key):
        raise OpError(
            ErrorCode.UNAVAILABLE,
            f"the desktop user {name!r} is in use by another relay on this host; give each "
            "relay its own RELAYDESK_DESKTOP_USER (or none, to take one from the pool)",
            {"field": "desktop_user", "desktop_user": name},
        )
    try:
        user = resolve_desktop_user(name)
    except BaseException:
        _release(name, key)
        raise
    assert user is not None  # only root relays lease
    remembered = _remembered(state_dir)
    _remember(state_dir, name)
    return UserLease(user, key, remembered if remembered not in (None, name) else None)


def lease_from_pool(state_dir: Path, size: int) -> UserLease:
    """Claim one account of the pool for this relay, preferring the one it used last
    (created when missing; blocking)."""
    key = relay_key(state_dir)
    remembered = _remembered(state_dir)
    for name in _candidates(remembered, size):
        if not _claim(name, key):
            continue
        try:
            user = resolve_desktop_user(name)
        except OpError:
            _release(name, key)
            raise
        assert user is not None
        if name != remembered and _has_processes(user.uid):
            logger.info("pool account %s still runs processes of an earlier relay", name)
            _release(name, key)
            continue
        _remember(state_dir, name)
        previous = remembered if remembered not in (None, name) else None
        return UserLease(user, key, previous)
    raise OpError(
        ErrorCode.UNAVAILABLE,
        f"every desktop user of the pool ({POOL_PREFIX}1..{size}) is in use by another relay; "
        "raise RELAYDESK_DESKTOP_USER_POOL",
        {"field": "desktop_user"},
    )


def proc_hides_processes(mounts: Path = Path("/proc/mounts")) -> bool:
    """Whether ``/proc`` hides other users' processes (``hidepid=invisible``, or ``2``): a
    desktop's programs then cannot list the processes of other accounts at all. Without it
    they see them (command lines included) but cannot read their environment, memory or files,
    nor signal or trace them: every relay's desktops run as an account of their own."""
    try:
        lines = mounts.read_text(encoding="utf-8").splitlines()
    except OSError:
        return False
    for line in lines:
        fields = line.split()
        if len(fields) >= 4 and fields[1] == "/proc" and fields[2] == "proc":
            options = set(fields[3].split(","))
            return bool(options & {"hidepid=2", "hidepid=invisible"})
    return False


def _candidates(remembered: str | None, size: int) -> Iterator[str]:
    pool = [f"{POOL_PREFIX}{i}" for i in range(1, size + 1)]
    if remembered in pool:
        yield remembered
    yield from (name for name in pool if name != remembered)


def _has_processes(uid: int) -> bool:
    for proc in psutil.process_iter(["uids"]):
        uids = proc.info.get("uids")
        if uids is not None and uid in (uids.real, uids.effective, uids.saved):
            return True
    return False


def _lock_dir() -> Path:
    """The root-only directory of the lease files (0700, the relay's, never a link)."""
    for directory in (LOCK_DIR.parent, LOCK_DIR):
        with contextlib.suppress(FileExistsError):
            directory.mkdir(mode=0o700)
        info = directory.lstat()
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
            raise OSError(errno.EPERM, f"{directory}: not a directory of the relay's")
        if stat.S_IMODE(info.st_mode) != 0o700:
            directory.chmod(0o700)
    return LOCK_DIR


def _claim(name: str, key: str) -> bool:
    """Take (or share, as the same relay) the lease file of ``name``; False: another relay's."""
    with _HELD_LOCK:
        held = _HELD.get(name)
        if held is not None:
            if held.key != key:
                return False
            held.count += 1
            return True
        fd = os.open(
            _lock_dir() / f"{name}.lock",
            os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
        )
        if _flock(fd, key):
            _HELD[name] = _Held(fd, key)
            return True
        os.close(fd)
        return False


def _flock(fd: int, key: str) -> bool:
    """Exclusive: write ``key``, then share. Held by others: share only when they are ``key``.
    The shared lock is confirmed against the file's key (a downgrade is not atomic)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        if _read_key(fd) != key:
            return False
    else:
        os.ftruncate(fd, 0)
        os.pwrite(fd, key.encode("ascii"), 0)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return _read_key(fd) == key


def _read_key(fd: int) -> str:
    return os.pread(fd, _KEY_BYTES, 0).decode("ascii", "replace").strip()


def _release(name: str, key: str) -> None:
    with _HELD_LOCK:
        held = _HELD.get(name)
        if held is None or held.key != key:
            return
        held.count -= 1
        if held.count <= 0:
            del _HELD[name]
            os.close(held.fd)  # drops the flock


def _remembered(state_dir: Path) -> str | None:
    try:
        name = (state_dir / REMEMBERED_NAME).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return name or None


def _remember(state_dir: Path, name: str) -> None:
    with contextlib.suppress(OSError):
        path = state_dir / REMEMBERED_NAME
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w", encoding="ascii") as out:
            out.write(name + "\n")


def desktop_account_uids(size: int, *names: str) -> frozenset[int]:
    """Uids of the pool's accounts that exist, of ``names`` and of the default account: whose
    files a kept home may hold from an earlier holder (relay/desktops/user.py ``reown_home``)."""
    uids = set()
    for name in (*(f"{POOL_PREFIX}{i}" for i in range(1, size + 1)), DEFAULT_DESKTOP_USER, *names):
        with contextlib.suppress(KeyError):
            uids.add(pwd.getpwnam(name).pw_uid)
    uids.discard(0)
    return frozenset(uids)
