"""The desktops' directories: who they run as, their homes (per session or kept per slot),
the relay's private directories and logs, and the removal of ones no desktop owns."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
from pathlib import Path
from typing import Any

from relay.desktops.audio import stale_runtime_dirs
from relay.desktops.config import DesktopSettings
from relay.desktops.credentials import PRIVATE_FILE_MODE, private_dir
from relay.desktops.leases import (
    UserLease,
    desktop_account_uids,
    lease_configured,
    lease_from_pool,
    mark_busy,
    proc_hides_processes,
    relay_key,
)
from relay.desktops.snapshot_files import seed_home
from relay.desktops.user import (
    DesktopUser,
    directory_size,
    gate_homes_root,
    hand_home_to_root,
    homes_root,
    make_session_tmp,
    prepare_home,
    reown_home,
    session_tmp,
)
from relay.desktops.validation import StartRequest
from wire.errors import ErrorCode, OpError
from wire.ids import DesktopSessionId

logger = logging.getLogger(__name__)


class Homes:
    """This relay's desktop user (leased once, for the relay's lifetime) and the desktops'
    home directories."""

    def __init__(self, config: DesktopSettings) -> None:
        self.config = config
        self._user: DesktopUser | None = None
        self._lease: UserLease | None = None
        self._user_resolved = False
        self._resolving = asyncio.Lock()

    async def desktop_user(self) -> DesktopUser | None:
        """Who desktops run as (None: as the relay); a root relay leases its account here
        (``unavailable`` when another relay holds it: relay/desktops/leases.py)."""
        async with self._resolving:
            if not self._user_resolved:
                self._lease = await asyncio.to_thread(self._take)
                self._user = self._lease.user if self._lease is not None else None
                self._user_resolved = True
        return self._user

    def _take(self) -> UserLease | None:
        if os.geteuid() != 0:
            return None
        config = self.config
        if config.desktop_user:
            lease = lease_configured(config.desktop_user, config.state_dir)
        else:
            lease = lease_from_pool(config.state_dir, config.desktop_user_pool)
        try:
            gate_homes_root(self.root_for(lease.user), lease.user)
        except BaseException:
            lease.release()
            raise
        logger.info("desktops of this relay run as %s (uid %d)", lease.user.name, lease.user.uid)
        if not proc_hides_processes():
            logger.info(
                "/proc shows every user's processes to desktops (their command lines, not "
                "their environment or memory); mount it with hidepid=invisible to hide them"
            )
        return lease

    @property
    def changed_user(self) -> bool:
        """Whether this relay's desktops ran as another account before (its recorded desktops
        cannot be kept: they run as an account this relay no longer holds)."""
        return self._lease is not None and self._lease.previous is not None

    def release(self) -> None:
        """Give the account back (the relay's end; its desktops are stopped or left to the
        relay that re-adopts them, which shares the lease while both run)."""
        self.mark_busy(False)
        lease, self._lease = self._lease, None
        if lease is not None:
            lease.release()
        self._user_resolved = False
        self._user = None

    def mark_busy(self, running: bool) -> None:
        """Desktops of this kind run (or no longer run) as the relay's account: the other
        kind's last stop must not kill their processes (relay/desktops/teardown.py)."""
        if self._user is not None:
            mark_busy(self._user.name, id(self), running)

    def root(self) -> Path:
        """Where the homes are (depends on the desktop user: resolve it first)."""
        return self.root_for(self._user)

    def root_for(self, user: DesktopUser | None) -> Path:
        return homes_root(self.config.state_dir, self.config.homes_dir, user)

    def home_of(self, kind: str, slot: str, session_id: str, persist: bool) -> Path:
        """A session's own home, or the slot's kept one."""
        if persist:
            return self.root() / "persistent" / f"{kind}-{slot}"
        return self.root() / "sessions" / session_id

    async def prepare(
        self, req: StartRequest, session_id: str
    ) -> tuple[Path, DesktopUser | None, Path | None]:
        """The home of a new session, ready, and its TMPDIR (None: it has none); a kept home
        over its size limit is refused."""
        user = await self.desktop_user()
        home = self.home_of(req.kind, req.slot, session_id, req.persist_home)
        if req.persist_home and home.is_dir():
            size = await asyncio.to_thread(directory_size, home)
            if (error := self.over_limit(size, req.slot)) is not None:
                raise error
            if user is not None:
                await asyncio.to_thread(self._reown, home, user)
        await asyncio.to_thread(prepare_home, home, user, fresh=not req.persist_home)
        if req.seed_home is not None:
            await asyncio.to_thread(seed_home, Path(req.seed_home), home, user)
        # The session's TMPDIR: its own, counted with its home against the size limit.
        tmp = self.tmp_of(session_id)
        try:
            await asyncio.to_thread(make_session_tmp, tmp, user)
        except OSError as err:
            logger.warning("desktop %s has no TMPDIR of its own: %s", req.slot, err)
            return home, user, None
        return home, user, tmp

    def tmp_of(self, desktop_session_id: str) -> Path:
        """The TMPDIR of a desktop's session."""
        return session_tmp(relay_key(self.config.state_dir), desktop_session_id)

    def tmp_root(self) -> Path:
        """This relay's parent of its sessions' TMPDIRs."""
        return self.tmp_of("x").parent

    def over_limit(self, size: int, slot: str) -> OpError | None:
        """``limit_reached`` for a home of ``size`` bytes over the relay's limit."""
        if size <= self.config.home_max_mb * 1024 * 1024:
            return None
        return OpError(
            ErrorCode.LIMIT_REACHED,
            f"the home of slot {slot!r} holds {size // 2**20} MB, more than "
            f"{self.config.home_max_mb} MB (RELAYDESK_DESKTOP_HOME_MAX_MB); wipe a kept home "
            "with desktop_reset_home",
            {"field": "persist_home", "size_mb": size // 2**20},
        )

    def _reown(self, home: Path, user: DesktopUser) -> None:
        """A kept home made by another account becomes this one's (blocking)."""
        hand_home_to_root(home)
        earlier = desktop_account_uids(self.config.desktop_user_pool, self.config.desktop_user)
        if changed := reown_home(home, user, earlier - {user.uid}):
            logger.info("kept home %s: %d entries given to %s", home.name, changed, user.name)


def secure_state_dir(config: DesktopSettings) -> None:
    """Make the state, log and run directories 0700 and earlier desktop logs 0600."""
    for directory in (config.state_dir, config.log_dir, config.run_dir):
        private_dir(directory)
    for log in config.log_dir.glob("*.log"):
        log.chmod(PRIVATE_FILE_MODE)


def remove_dirs(parent: Path, keep: set[DesktopSessionId]) -> None:
    """Directories under ``parent`` not named after a kept session (blocking)."""
    if not parent.is_dir():
        return
    for path in parent.iterdir():
        if path.is_dir() and path.name not in keep:
            shutil.rmtree(path, ignore_errors=True)


def remove_stale_runtime_dirs(root: Path) -> None:
    """Sound directories of displays no X server holds (a start interrupted by a kill)."""
    for directory in stale_runtime_dirs(root):
        shutil.rmtree(directory, ignore_errors=True)


def open_append(path: Path) -> Any:
    """A private log file opened for appending."""
    private_dir(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, PRIVATE_FILE_MODE)
    return os.fdopen(fd, "ab")


def open_truncated(path: Path) -> Any:
    """A private log file opened empty."""
    private_dir(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE_MODE)
    return os.fdopen(fd, "wb")
