"""The snapshot ops (server → relay): save a desktop, start forks of it, reset one in place,
delete a snapshot (docs/desktops.md, "Snapshots and forks", "Reset").

A snapshot's data stays on the relay that made it, under the id the server gave it; the
server keeps its name, owner conversation and metadata. Names and ids follow one strict
pattern each, so neither can ever name a path.
"""

import re
from typing import Final, NotRequired, TypedDict

from wire.ops import DesktopKind, DesktopStartResult, OpSpec

# What a person names a snapshot by: no path characters, no leading dot or dash.
SNAPSHOT_NAME_RE: Final = re.compile(r"^[a-z0-9][a-z0-9_-]{0,47}$")
# What the server names its data by on the relay (``secrets.token_hex(16)``).
SNAPSHOT_ID_RE: Final = re.compile(r"^[0-9a-f]{32}$")


class SnapshotWindow(TypedDict):
    """A top-level window the snapshot saw, by its app (WM_CLASS), in root coordinates."""

    app: str
    x: int
    y: int
    width: int
    height: int


class DesktopSnapshotArgs(TypedDict):
    """``desktop.snapshot``: the exact desktop, and the id its data is kept under."""

    desktop_session_id: str
    snapshot_id: str
    kind: NotRequired[DesktopKind]
    slot: NotRequired[str]


class DesktopSnapshotResult(TypedDict):
    snapshot_id: str
    profile: str | None
    geometry: str
    depth: int
    # Apps started by desktop.launch (relaunched in every fork; the profile's and relay's
    # start programs start anyway), and every window with its geometry.
    apps: list[str]
    windows: list[SnapshotWindow]
    size_bytes: int


class SnapshotIdArgs(TypedDict):
    snapshot_id: str


class SnapshotDeleteResult(TypedDict):
    deleted: bool


class DesktopForkArgs(TypedDict):
    """``desktop.fork``: one desktop per slot, each with its own copy of the snapshot."""

    snapshot_id: str
    slots: list[str]
    started_by: NotRequired[str | None]
    audio: NotRequired[bool | None]


class ForkFailure(TypedDict):
    slot: str
    code: str
    message: str


class DesktopForkResult(TypedDict):
    desktops: list[DesktopStartResult]
    failed: list[ForkFailure]


class DesktopResetArgs(TypedDict):
    """``desktop.reset``: the exact desktop, replaced in its slot by the snapshot's state
    (``snapshot_id``) or a fresh start of its profile."""

    desktop_session_id: str
    kind: NotRequired[DesktopKind]
    slot: NotRequired[str]
    snapshot_id: NotRequired[str]
    started_by: NotRequired[str | None]


class DesktopResetResult(DesktopStartResult):
    replaced_session_id: str


DESKTOP_SNAPSHOT: Final = OpSpec("desktop.snapshot", DesktopSnapshotArgs, DesktopSnapshotResult)
DESKTOP_SNAPSHOT_DELETE: Final = OpSpec(
    "desktop.snapshot_delete", SnapshotIdArgs, SnapshotDeleteResult
)
DESKTOP_FORK: Final = OpSpec("desktop.fork", DesktopForkArgs, DesktopForkResult)
DESKTOP_RESET: Final = OpSpec("desktop.reset", DesktopResetArgs, DesktopResetResult)
