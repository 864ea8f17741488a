"""A snapshot's files on its relay: the copy of a desktop's home and what it records, under
the relay's state directory (root's, 0700), and the seeding of a new home from it.

Everything here blocks: callers run it off the event loop. A snapshot's directory is named by
the id the server gave it (checked against one pattern), never by anything a desktop chose.
The copy of a live home is walked through descriptors and never follows a link (the home is
the desktop user's, who may swap a directory for a link meanwhile); it tolerates files that
vanish while it is read (a browser rewrites its profile all the time) and leaves out the
browser's single-instance locks, which would point a fork's browser at the original desktop's.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import stat
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

from relay.desktops.credentials import PRIVATE_FILE_MODE, private_dir
from relay.desktops.user import DesktopUser, directory_size
from wire.errors import ErrorCode, InvalidArgs, OpError
from wire.snapshots import SNAPSHOT_ID_RE, SnapshotWindow

logger = logging.getLogger(__name__)

HOME: Final = "home"
META: Final = "snapshot.json"
# Chromium's single-instance lock, socket and cookie: a copy would make a fork's browser hand
# its window to the original desktop's browser.
LEFT_OUT: Final = frozenset({"SingletonLock", "SingletonSocket", "SingletonCookie"})
SIZE_SETTING: Final = "RELAYDESK_SNAPSHOT_MAX_MB"
COPY_CHUNK: Final = 1 << 20


@dataclass
class SnapshotMeta:
    """What a snapshot records besides its home."""

    profile: str | None
    geometry: str
    depth: int
    apps: list[str] = field(default_factory=list)
    windows: list[SnapshotWindow] = field(default_factory=list)
    size_bytes: int = 0

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SnapshotMeta:
        return cls(
            profile=data.get("profile"),
            geometry=str(data["geometry"]),
            depth=int(data["depth"]),
            apps=[str(a) for a in data.get("apps", [])],
            windows=[_window(w) for w in data.get("windows", [])],
            size_bytes=int(data.get("size_bytes", 0)),
        )


def _window(data: dict[str, Any]) -> SnapshotWindow:
    return {
        "app": str(data["app"]),
        "x": int(data["x"]),
        "y": int(data["y"]),
        "width": int(data["width"]),
        "height": int(data["height"]),
    }


class SnapshotFiles:
    """The snapshots this relay keeps (``<state_dir>/snapshots/<id>/``)."""

    def __init__(self, state_dir: Path, max_mb: int) -> None:
        self.root = state_dir / "snapshots"
        self.max_mb = max_mb

    def path(self, snapshot_id: str) -> Path:
        if not SNAPSHOT_ID_RE.fullmatch(snapshot_id):
            raise InvalidArgs("snapshot_id", f"must match ^{SNAPSHOT_ID_RE.pattern}$")
        return self.root / snapshot_id

    def home(self, snapshot_id: str) -> Path:
        return self.path(snapshot_id) / HOME

    def save(self, snapshot_id: str, home: Path, meta: SnapshotMeta) -> SnapshotMeta:
        """Copy ``home`` and write ``meta`` as the snapshot ``snapshot_id``; refused over the
        size limit (``limit_reached`` naming it) or when the id is taken (``busy``)."""
        target = self.path(snapshot_id)
        size = directory_size(home)
        if size > self.max_mb * 2**20:
            raise OpError(
                ErrorCode.LIMIT_REACHED,
                f"the desktop's home holds {size // 2**20} MB, more than a snapshot may "
                f"({self.max_mb} MB, {SIZE_SETTING})",
                {"field": "name", "size_mb": size // 2**20, "limit_mb": self.max_mb},
            )
        private_dir(self.root)
        if target.exists():
            raise OpError(ErrorCode.BUSY, "a snapshot with this id exists", {"field": "name"})
        partial = self.root / f".{snapshot_id}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        private_dir(partial)
        try:
            _copy_live_home(home, partial / HOME)
            meta.size_bytes = directory_size(partial / HOME)
            meta_path = partial / META
            meta_path.write_text(json.dumps(asdict(meta)), encoding="utf-8")
            meta_path.chmod(PRIVATE_FILE_MODE)
            partial.rename(target)
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise
        return meta

    def load(self, snapshot_id: str) -> SnapshotMeta:
        """The snapshot's record; ``not_found`` naming ``snapshot`` when this relay has none."""
        meta_path = self.path(snapshot_id) / META
        try:
            return SnapshotMeta.from_json(json.loads(meta_path.read_text(encoding="utf-8")))
        except FileNotFoundError:
            raise OpError(
                ErrorCode.NOT_FOUND,
                "snapshot: this relay keeps no such snapshot",
                {"field": "snapshot"},
            ) from None
        except (ValueError, KeyError, TypeError) as err:
            raise OpError(ErrorCode.NOT_FOUND, "snapshot: its record is unreadable") from err

    def delete(self, snapshot_id: str) -> bool:
        target = self.path(snapshot_id)
        existed = target.is_dir()
        shutil.rmtree(target, ignore_errors=True)
        return existed


def _copy_live_home(source: Path, target: Path) -> None:
    """Copy a running desktop's home, walked through descriptors (``os.fwalk``, never
    following a link: the desktop user may swap a directory for a link while it is read, and
    root must not copy what the link points at). Regular files, directories and links are
    copied; sockets, pipes and devices, files that vanish while they are read and the
    browser's single-instance locks are left out."""
    skipped = 0
    private_dir(target)
    for root, dirs, files, root_fd in os.fwalk(source, follow_symlinks=False):
        here = target / os.path.relpath(root, source)
        # A link to a directory is listed with the directories (never entered): a link.
        links = [d for d in dirs if _is_link(root_fd, d)]
        dirs[:] = [d for d in dirs if d not in LEFT_OUT and d not in links]
        for name in dirs:
            with contextlib.suppress(FileExistsError):
                (here / name).mkdir(mode=0o700)
        for name in (*links, *files):
            if name in LEFT_OUT or not _copy_entry(root_fd, name, here / name):
                skipped += 1
    if skipped:
        logger.info("snapshot copy left out %d entries (not files, locks, or gone)", skipped)


def _is_link(dir_fd: int, name: str) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _copy_entry(dir_fd: int, name: str, target: Path) -> bool:
    """One entry of a directory opened as ``dir_fd``: a link as a link, a regular file's
    bytes and mode; False for anything else or an entry that went away."""
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISLNK(info.st_mode):
            os.symlink(os.readlink(name, dir_fd=dir_fd), target)
            return True
        if not stat.S_ISREG(info.st_mode):
            return False
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError:
        return False
    with os.fdopen(fd, "rb") as source:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        with open(target, "xb") as copy:
            shutil.copyfileobj(source, copy, COPY_CHUNK)
    target.chmod(stat.S_IMODE(info.st_mode) & 0o777)
    return True


def seed_home(snapshot_home: Path, home: Path, user: DesktopUser | None) -> None:
    """Fill a new, empty home with a copy of a snapshot's (``cp --reflink=auto``: shared
    blocks where the file system can, a plain copy elsewhere), owned by the desktop user.
    The home is the new session's and no process of it runs yet."""
    subprocess.run(
        ["cp", "-a", "--reflink=auto", f"{snapshot_home}/.", f"{home}/"],
        check=True,
        capture_output=True,
    )
    if user is None:
        return
    # ``cp -a`` gave the home itself the snapshot's owner too: it is the user's again first.
    os.chown(home, user.uid, user.gid, follow_symlinks=False)
    for root, dirs, files in os.walk(home):
        for name in (*dirs, *files):
            os.chown(os.path.join(root, name), user.uid, user.gid, follow_symlinks=False)
