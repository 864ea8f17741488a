"""A snapshot's files on the relay: what is copied and left out, the size limit, the id rule,
and a fork's home seeded from it (relay/desktops/snapshot_files.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from relay.desktops.snapshot_files import SnapshotFiles, SnapshotMeta, seed_home
from relay.desktops.user import DesktopUser
from wire.errors import ErrorCode, InvalidArgs, OpError

pytestmark = pytest.mark.unit

SNAPSHOT_ID = "ab" * 16


def _home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    (home / ".config" / "browser").mkdir(parents=True)
    (home / "notes.txt").write_text("kept")
    (home / ".config" / "browser" / "Preferences").write_text("{}")
    (home / ".config" / "browser" / "SingletonLock").symlink_to("otherhost-123")
    (home / "link").symlink_to("/etc/passwd")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("not the desktop's")
    (home / "escape").symlink_to(outside, target_is_directory=True)
    os.mkfifo(home / "pipe")
    return home


def _meta() -> SnapshotMeta:
    return SnapshotMeta(profile="minimal", geometry="1280x800", depth=24, apps=["xterm"])


def test_a_snapshot_keeps_the_home_without_the_browser_lock(tmp_path: Path) -> None:
    files = SnapshotFiles(tmp_path / "state", max_mb=10)
    saved = files.save(SNAPSHOT_ID, _home(tmp_path), _meta())
    copy = files.home(SNAPSHOT_ID)
    assert (copy / "notes.txt").read_text() == "kept"
    assert (copy / ".config" / "browser" / "Preferences").exists()
    assert not os.path.lexists(copy / ".config" / "browser" / "SingletonLock")
    assert os.readlink(copy / "link") == "/etc/passwd", "links are copied as links"
    assert (copy / "escape").is_symlink() and not (copy / "escape").resolve().is_relative_to(copy)
    assert not os.path.lexists(copy / "pipe"), "a pipe is never opened nor copied"
    assert saved.size_bytes > 0
    assert files.load(SNAPSHOT_ID) == saved
    assert oct((tmp_path / "state" / "snapshots").stat().st_mode & 0o777) == "0o700"


def test_a_home_over_the_limit_is_refused_naming_the_setting(tmp_path: Path) -> None:
    home = _home(tmp_path)
    (home / "big").write_bytes(b"\0" * (2 * 2**20))
    with pytest.raises(OpError) as refused:
        SnapshotFiles(tmp_path / "state", max_mb=1).save(SNAPSHOT_ID, home, _meta())
    assert refused.value.code is ErrorCode.LIMIT_REACHED
    assert "RELAYDESK_SNAPSHOT_MAX_MB" in refused.value.message
    assert not (tmp_path / "state" / "snapshots" / SNAPSHOT_ID).exists()


@pytest.mark.parametrize("bad", ["../x", "ab" * 15, "AB" * 16, "/etc", ""])
def test_an_id_that_is_not_ours_never_names_a_path(tmp_path: Path, bad: str) -> None:
    files = SnapshotFiles(tmp_path / "state", max_mb=1)
    with pytest.raises(InvalidArgs) as refused:
        files.load(bad)
    assert refused.value.details["field"] == "snapshot_id"


def test_an_unknown_snapshot_is_not_found_naming_snapshot(tmp_path: Path) -> None:
    with pytest.raises(OpError) as missing:
        SnapshotFiles(tmp_path / "state", max_mb=1).load(SNAPSHOT_ID)
    assert missing.value.code is ErrorCode.NOT_FOUND
    assert missing.value.details["field"] == "snapshot"


def test_delete_removes_the_files(tmp_path: Path) -> None:
    files = SnapshotFiles(tmp_path / "state", max_mb=10)
    files.save(SNAPSHOT_ID, _home(tmp_path), _meta())
    assert files.delete(SNAPSHOT_ID) is True
    assert files.delete(SNAPSHOT_ID) is False


@pytest.mark.skipif(os.geteuid() != 0, reason="handing files to another account needs root")
def test_a_seeded_home_is_the_desktop_users_own_copy(tmp_path: Path) -> None:
    files = SnapshotFiles(tmp_path / "state", max_mb=10)
    files.save(SNAPSHOT_ID, _home(tmp_path), _meta())
    fork = tmp_path / "fork"
    fork.mkdir(mode=0o700)
    user = DesktopUser("nobody", 65534, 65534, fork)
    seed_home(files.home(SNAPSHOT_ID), fork, user)
    for path in (fork, fork / "notes.txt", fork / ".config" / "browser" / "Preferences"):
        info = path.lstat()
        assert (info.st_uid, info.st_gid) == (65534, 65534), path
    (fork / "notes.txt").write_text("the fork's own")
    assert (files.home(SNAPSHOT_ID) / "notes.txt").read_text() == "kept"
