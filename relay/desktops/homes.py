"""The desktops' directories: who they run as, their homes (per session or kept per slot),
the relay's private directories and logs, and the removal of ones no desktop owns."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path
from typing import Any

from relay.desktops.audio import stale_runtime_dirs
from relay.desktops.config import DesktopConfig
from relay.desktops.credentials import PRIVATE_FILE_MODE, private_dir
from relay.desktops.user import (
    DesktopUser,
    directory_size,
    homes_root,
    prepare_home,
    resolve_desktop_user,
)
from relay.desktops.validation import StartRequest
from wire.errors import ErrorCode, OpError
from wire.ids import DesktopSessionId


class Homes:
    """The desktop user (resolved once) and the desktops' home directories."""

    def __init__(self, config: DesktopConfig) -> None:
        self.config = config
        self._user: DesktopUser | None = None
        self._user_resolved = False

    async def desktop_user(self) -> DesktopUser | None:
        """Who desktops run as (None: as the relay); created on first use when root."""
        if not self._user_resolved:
            self._user = await asyncio.to_thread(resolve_desktop_user, self.config.desktop_user)
            self._user_resolved = True
        return self._user

    def root(self) -> Path:
        """Where the homes are (depends on the desktop user: resolve it first)."""
        return homes_root(self.config.state_dir, self.config.homes_dir, self._user)

    def home_of(self, kind: str, slot: str, session_id: str, persist: bool) -> Path:
        """A session's own home, or the slot's kept one."""
        if persist:
            return self.root() / "persistent" / f"{kind}-{slot}"
        return self.root() / "sessions" / session_id

    async def prepare(self, req: StartRequest, session_id: str) -> tuple[Path, DesktopUser | None]:
        """The home of a new session, ready; a kept home over its size limit is refused."""
        user = await self.desktop_user()
        home = self.home_of(req.kind, req.slot, session_id, req.persist_home)
        if req.persist_home and home.is_dir():
            size = await asyncio.to_thread(directory_size, home)
            limit = self.config.home_max_mb * 1024 * 1024
            if size > limit:
                raise OpError(
                    ErrorCode.LIMIT_REACHED,
                    f"the kept home of slot {req.slot!r} holds {size // 2**20} MB, more than "
                    f"{self.config.home_max_mb} MB; wipe it with desktop_reset_home",
                    {"field": "persist_home", "size_mb": size // 2**20},
                )
        await asyncio.to_thread(prepare_home, home, user, fresh=not req.persist_home)
        return home, user


def secure_state_dir(config: DesktopConfig) -> None:
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
