"""The relay's ops (server → relay requests): names, typed arguments and results, one check.

Every op is an :class:`OpSpec`: its name, a ``TypedDict`` of its arguments and one of its
result. The server builds arguments with those ``TypedDict`` constructors and reads results
through them (``mypy --strict`` refuses a field that does not exist); the relay checks every
request's arguments against the same ``TypedDict`` before its handler runs
(:func:`check_args`: a missing, unknown or mistyped field is ``invalid_args`` naming it).
"""

from dataclasses import dataclass
from typing import (
    Any,
    Final,
    Generic,
    Literal,
    NotRequired,
    TypedDict,
    TypeVar,
    cast,
    get_args,
)

from wire.desktop_tool_args import ClipboardOp, FileOp, WindowOp
from wire.op_check import check_typeddict
from wire.screen_actions import SCREEN_ACTIONS, ScreenAction
from wire.screen_args import ImageFormat, ScrollDirection

DesktopKind = Literal["virtual", "local", "docker"]
DesktopState = Literal["starting", "running", "paused", "stopping", "stopped", "failed", "unknown"]
DESKTOP_KINDS: Final[tuple[DesktopKind, ...]] = get_args(DesktopKind)
DESKTOP_STATES: Final[tuple[DesktopState, ...]] = get_args(DesktopState)
ChannelType = Literal["vnc", "audio", "file", "cdp", "recording"]
# Announced in ``hello`` by a relay that denies apps to agents (RELAYDESK_DENY_APPS): what a
# viewer shows cannot be masked, so the server opens no viewer of its desktops for an agent.
DENIED_APPS_CAPABILITY: Final = "denied_apps"
# A relay that keeps a warm pool answers ``desktop.pool`` with it (docs/desktops.md).
POOL_CAPABILITY: Final = "pool"


class RelayRow(TypedDict):
    """One desktop as a relay reports it (status, hello, start, ``desktop.changed``)."""

    desktop_session_id: str
    kind: DesktopKind
    slot: str
    state: DesktopState
    started_at: NotRequired[str | None]
    started_by: NotRequired[str | None]
    updated_at: NotRequired[str]
    reason: NotRequired[str | None]
    geometry: NotRequired[str]
    depth: NotRequired[int]
    display: NotRequired[str | None]
    websockify_port: NotRequired[int]
    vnc_port: NotRequired[int]
    audio: NotRequired[bool]
    audio_reason: NotRequired[str | None]
    profile: NotRequired[str | None]
    persist_home: NotRequired[bool]


class Empty(TypedDict):
    """No arguments."""


class PingArgs(TypedDict):
    echo: NotRequired[object]


class PingResult(TypedDict):
    echo: object


class DesktopStartArgs(TypedDict):
    kind: NotRequired[DesktopKind]
    slot: NotRequired[str]
    geometry: NotRequired[str]
    depth: NotRequired[int]
    audio: NotRequired[bool | None]
    started_by: NotRequired[str | None]
    profile: NotRequired[str | None]
    persist_home: NotRequired[bool]


class DesktopStartResult(RelayRow):
    already_running: bool
    # Whether a ready desktop of the relay's warm pool served the start (docs/desktops.md).
    from_pool: NotRequired[bool]


class PoolProfile(TypedDict):
    """One profile's part of a relay's warm pool."""

    profile: str
    size: int
    ready: int
    starting: int


class PoolReport(TypedDict):
    """``desktop.pool``: the relay's warm pool (ready desktops per profile at ``geometry``)
    and how matching starts fared against it since the relay started."""

    geometry: str
    profiles: list[PoolProfile]
    hits: int
    misses: int


class DesktopStatusResult(TypedDict):
    desktops: list[RelayRow]


class SessionArgs(TypedDict):
    """Ops that name one running desktop by its session."""

    desktop_session_id: str


class DesktopHoldsResult(TypedDict):
    holds: bool


class DesktopStopArgs(TypedDict):
    desktop_session_id: str
    kind: NotRequired[DesktopKind]
    slot: NotRequired[str]


class DesktopPauseArgs(TypedDict):
    """``desktop.pause`` / ``desktop.resume``: the exact desktop, like a compare-and-stop."""

    desktop_session_id: str
    kind: NotRequired[DesktopKind]
    slot: NotRequired[str]


class DesktopStopResult(TypedDict):
    stopped: bool
    was_running: NotRequired[bool]
    conflict: NotRequired[bool]
    current_session_id: NotRequired[str]
    stopped_session_id: NotRequired[str]


class ProfileInfo(TypedDict):
    name: str
    available: bool
    default: bool
    missing: list[str]
    description: str
    apps: list[dict[str, Any]]


class DesktopProfilesResult(TypedDict):
    profiles: list[ProfileInfo]


class DesktopTargetArgs(TypedDict):
    """One desktop: ``desktop_session_id``, else the running one in ``(kind, slot)``."""

    desktop_session_id: NotRequired[str]
    kind: NotRequired[DesktopKind]
    slot: NotRequired[str]


class DesktopAppsResult(TypedDict):
    desktop_session_id: str
    profile: str | None
    launchable: list[dict[str, Any]]


class DesktopLaunchArgs(DesktopTargetArgs):
    app: str
    # Wait this long for the app's window on the accessibility bus (0: do not wait).
    wait_s: NotRequired[float]


class DesktopLaunchResult(TypedDict):
    desktop_session_id: str
    app: str
    launched: bool
    pid: NotRequired[int]
    # The app as desktop_apps lists it, once its window is on the accessibility bus.
    window: NotRequired[dict[str, Any] | None]
    accessible: NotRequired[bool]


class SlotArgs(TypedDict):
    kind: NotRequired[DesktopKind]
    slot: NotRequired[str]


class DesktopResetHomeResult(TypedDict):
    kind: DesktopKind
    slot: str
    reset: bool
    existed: bool


A11yCall = Literal["apps", "observe", "find", "read", "act", "wait"]
A11Y_CALLS: Final[tuple[A11yCall, ...]] = get_args(A11yCall)


class A11yArgs(DesktopTargetArgs):
    """``desktop.a11y``: one accessibility call on one desktop (docs/accessibility.md); its
    parameters are checked by the server's action schemas and again by the relay's worker."""

    call: A11yCall
    params: dict[str, Any]


class A11yResult(TypedDict):
    result: dict[str, Any]


# -- desktop tools: windows, clipboard, shell, files (docs/desktop-tools.md; their argument rules
# are in wire.desktop_tool_args) ---------------------------------------------------------------


class WindowInfo(TypedDict):
    """One top-level client window (EWMH ``_NET_CLIENT_LIST``); geometry is the client
    window's (without the window manager's frame) in root coordinates."""

    id: int
    name: str
    pid: int | None
    app: str
    x: int
    y: int
    width: int
    height: int
    active: bool
    minimized: bool


class DesktopWindowsResult(TypedDict):
    desktop_session_id: str
    windows: list[WindowInfo]
    active: int | None


class DesktopWindowArgs(DesktopTargetArgs):
    window_id: int
    op: WindowOp
    x: NotRequired[int]
    y: NotRequired[int]
    width: NotRequired[int]
    height: NotRequired[int]


class DesktopWindowResult(TypedDict):
    desktop_session_id: str
    window_id: int
    op: WindowOp
    done: bool


class DesktopClipboardArgs(DesktopTargetArgs):
    op: ClipboardOp
    text: NotRequired[str]
    # set_png: the PNG image's bytes in base64
    png_b64: NotRequired[str]


class DesktopClipboardResult(TypedDict):
    desktop_session_id: str
    text: NotRequired[str]
    truncated: NotRequired[bool]
    set: NotRequired[bool]
    # get_png: the clipboard's image/png in base64; absent when it holds none
    png_b64: NotRequired[str]


class DesktopShellArgs(DesktopTargetArgs):
    command: str
    timeout_s: NotRequired[float]


class DesktopShellResult(TypedDict):
    desktop_session_id: str
    stdout: str
    stderr: str
    returncode: int | None
    timed_out: bool
    # Either stream was cut at the relay's cap (docs/desktop-tools.md).
    truncated: bool


class DesktopFileArgs(DesktopTargetArgs):
    op: FileOp
    path: str
    content: NotRequired[str]
    append: NotRequired[bool]
    offset: NotRequired[int]
    length: NotRequired[int]


class DesktopFileResult(TypedDict):
    desktop_session_id: str
    content: NotRequired[str]
    content_b64: NotRequired[str]
    exists: NotRequired[bool]
    files: NotRequired[list[str]]
    size: NotRequired[int]
    done: NotRequired[bool]


class FileTransfer(TypedDict):
    """A ``file`` channel's transfer (wire.home_files, docs/files.md): ``download`` sends the
    file's bytes from ``offset``; ``upload`` takes the bytes ``offset`` to ``length`` (the
    whole file's size) into the file's partial upload, then answers one JSON line."""

    op: Literal["upload", "download"]
    path: str
    offset: int
    length: NotRequired[int]
    exists: NotRequired[Literal["replace", "rename", "refuse"]]


class RecordingSegment(TypedDict):
    recording_id: str
    seq: int


class ChannelTarget(TypedDict):
    type: ChannelType
    desktop_session_id: str
    file: NotRequired[FileTransfer]
    # A ``recording`` channel: which finished segment it carries (wire/recording.py).
    segment: NotRequired[RecordingSegment]


class ChannelOpenArgs(TypedDict):
    channel_id: int
    target: ChannelTarget


class ChannelOpenResult(TypedDict):
    channel_id: int
    # audio channels: the stream's format
    sample_rate: NotRequired[int]
    channels: NotRequired[int]
    frame_ms: NotRequired[int]
    bitrate: NotRequired[int]
    # file channels: the file (home-relative) and its size
    path: NotRequired[str]
    size: NotRequired[int]


class KeyboardState(TypedDict):
    num_lock: bool | None
    caps_lock: bool | None
    scroll_lock: bool | None
    source: str | None


class VncDirectResult(TypedDict):
    port: int
    secret: str


class RevisionTarget(TypedDict):
    """The desktop session and display a screenshot was taken on."""

    desktop_session_id: str
    display: str | None


class ScreenRect(TypedDict):
    """A region of the screen in pixels."""

    x: int
    y: int
    width: int
    height: int


class ScreenGrid(TypedDict, total=False):
    """A grid drawn on a screenshot or zoom image, labelled in these coordinates."""

    coordinates: Literal["pixels", "normalized"]
    relative_to: ScreenRect


class ScreenTarget(TypedDict, total=False):
    """What every ``screen.<action>`` names first: ``desktop_session_id``, else the running
    desktop of ``kind`` (slot main); ``revision_target``, the desktop and display a guarded
    action's screenshot was taken on (the relay refuses the action on any other). The fields
    after these are the action's own, checked by ``wire.screen_args`` at both ends."""

    desktop_session_id: str
    kind: DesktopKind
    revision_target: RevisionTarget


class ImageArgs(ScreenTarget, total=False):
    format: str
    quality: int
    grid: ScreenGrid


class ScreenshotArgs(ImageArgs, total=False):
    preview_max_width: int


class ZoomArgs(ImageArgs, total=False):
    region: ScreenRect
    scale: float


class MoveArgs(ScreenTarget, total=False):
    x: int
    y: int


class ButtonArgs(MoveArgs, total=False):
    """A button pressed at (x, y); ``mouse_down`` and ``mouse_up`` without a point press
    where the pointer is."""

    button: str | int


class GuardedArgs(ButtonArgs, total=False):
    """A pointer action on a point chosen on a screenshot: its guard (``wire.guard``)."""

    guard: dict[str, Any]


class DragArgs(GuardedArgs, total=False):
    to_x: int
    to_y: int


class ScrollArgs(MoveArgs, total=False):
    direction: str
    amount: int


class TypeArgs(ScreenTarget, total=False):
    text: str


class KeyArgs(ScreenTarget, total=False):
    keys: str


ScreenArgs = (
    ScreenTarget
    | ScreenshotArgs
    | ZoomArgs
    | MoveArgs
    | ButtonArgs
    | GuardedArgs
    | DragArgs
    | ScrollArgs
    | TypeArgs
    | KeyArgs
)


class ScreenAnswer(TypedDict):
    """What every ``screen.<action>`` answers with: the desktop and display it ran on; an
    input action also whether it visibly took effect (``relay/screen/effect.py``)."""

    desktop_session_id: str
    display: str | None
    effect: NotRequired[Literal["changed", "no_visible_change", "unverifiable"]]
    effect_ms: NotRequired[int]


class ImageResult(ScreenAnswer):
    """A screenshot or zoom: the image, and the lossless capture the server keeps."""

    width: int
    height: int
    format: ImageFormat
    image: str
    capture: dict[str, Any]
    coordinates: Literal["full_resolution", "zoom"]
    preview: NotRequired[dict[str, Any]]
    region: NotRequired[ScreenRect]
    scale: NotRequired[float]
    screen: NotRequired[dict[str, int]]
    grid: NotRequired[dict[str, Any]]


class PointResult(ScreenAnswer):
    x: int
    y: int


class ButtonResult(PointResult):
    button: int
    guard: NotRequired[dict[str, Any]]


class DragResult(ButtonResult):
    to_x: int
    to_y: int


class ScrollResult(PointResult):
    direction: ScrollDirection
    amount: int


class TypeResult(ScreenAnswer):
    typed: int  # how many characters: never the text, which may be a password


class KeyResult(ScreenAnswer):
    keys: str


class ScreenSizeResult(ScreenAnswer):
    width: int
    height: int


class KeyboardStateResult(ScreenAnswer, KeyboardState):
    pass


ScreenResult = (
    ImageResult
    | PointResult
    | ButtonResult
    | DragResult
    | ScrollResult
    | TypeResult
    | KeyResult
    | ScreenSizeResult
    | KeyboardStateResult
)
# Each screen action's argument and result types.
SCREEN_TYPES: Final[dict[ScreenAction, tuple[type[Any], type[Any]]]] = {
    "screenshot": (ScreenshotArgs, ImageResult),
    "zoom": (ZoomArgs, ImageResult),
    "click": (GuardedArgs, ButtonResult),
    "double_click": (GuardedArgs, ButtonResult),
    "mouse_down": (GuardedArgs, ButtonResult),
    "mouse_up": (ButtonArgs, ButtonResult),
    "move": (MoveArgs, PointResult),
    "drag": (DragArgs, DragResult),
    "scroll": (ScrollArgs, ScrollResult),
    "type": (TypeArgs, TypeResult),
    "key": (KeyArgs, KeyResult),
    "key_down": (KeyArgs, KeyResult),
    "key_up": (KeyArgs, KeyResult),
    "mouse_position": (ScreenTarget, PointResult),
    "screen_size": (ScreenTarget, ScreenSizeResult),
    "keyboard_state": (ScreenTarget, KeyboardStateResult),
}


A = TypeVar("A")
R = TypeVar("R")


@dataclass(frozen=True)
class OpSpec(Generic[A, R]):
    """One op: its name and the types of its arguments and result."""

    name: str
    args: type[A]
    result: type[R]


PING: Final = OpSpec("ping", PingArgs, PingResult)
DESKTOP_START: Final = OpSpec("desktop.start", DesktopStartArgs, DesktopStartResult)
DESKTOP_STATUS: Final = OpSpec("desktop.status", Empty, DesktopStatusResult)
DESKTOP_HOLDS: Final = OpSpec("desktop.holds", SessionArgs, DesktopHoldsResult)
DESKTOP_STOP: Final = OpSpec("desktop.stop", DesktopStopArgs, DesktopStopResult)
DESKTOP_PAUSE: Final = OpSpec("desktop.pause", DesktopPauseArgs, RelayRow)
DESKTOP_RESUME: Final = OpSpec("desktop.resume", DesktopPauseArgs, RelayRow)
DESKTOP_PROFILES: Final = OpSpec("desktop.profiles", Empty, DesktopProfilesResult)
DESKTOP_POOL: Final = OpSpec("desktop.pool", Empty, PoolReport)
DESKTOP_APPS: Final = OpSpec("desktop.apps", DesktopTargetArgs, DesktopAppsResult)
DESKTOP_LAUNCH: Final = OpSpec("desktop.launch", DesktopLaunchArgs, DesktopLaunchResult)
DESKTOP_RESET_HOME: Final = OpSpec("desktop.reset_home", SlotArgs, DesktopResetHomeResult)
CHANNEL_OPEN: Final = OpSpec("channel.open", ChannelOpenArgs, ChannelOpenResult)
KEYBOARD_STATE: Final = OpSpec("keyboard.state", SessionArgs, KeyboardState)
VNC_DIRECT: Final = OpSpec("vnc.direct", SessionArgs, VncDirectResult)
DESKTOP_A11Y: Final = OpSpec("desktop.a11y", A11yArgs, A11yResult)
DESKTOP_WINDOWS: Final = OpSpec("desktop.windows", DesktopTargetArgs, DesktopWindowsResult)
DESKTOP_WINDOW: Final = OpSpec("desktop.window", DesktopWindowArgs, DesktopWindowResult)
DESKTOP_CLIPBOARD: Final = OpSpec("desktop.clipboard", DesktopClipboardArgs, DesktopClipboardResult)
DESKTOP_SHELL: Final = OpSpec("desktop.shell", DesktopShellArgs, DesktopShellResult)
DESKTOP_FILE: Final = OpSpec("desktop.file", DesktopFileArgs, DesktopFileResult)
SCREEN_OP_PREFIX: Final = "screen."
SCREEN: Final[dict[ScreenAction, OpSpec[ScreenArgs, ScreenResult]]] = {
    action: OpSpec(f"{SCREEN_OP_PREFIX}{action}", *SCREEN_TYPES[action])
    for action in SCREEN_ACTIONS
}


class InputReleaseResult(TypedDict):
    """``input.release``: the agent's held buttons and keys were released."""

    released: bool


INPUT_RELEASE: Final = OpSpec("input.release", SessionArgs, InputReleaseResult)

_ALL: tuple[OpSpec[Any, Any], ...] = (
    PING,
    DESKTOP_START,
    DESKTOP_STATUS,
    DESKTOP_HOLDS,
    DESKTOP_STOP,
    DESKTOP_PAUSE,
    DESKTOP_RESUME,
    DESKTOP_PROFILES,
    DESKTOP_POOL,
    DESKTOP_APPS,
    DESKTOP_LAUNCH,
    DESKTOP_RESET_HOME,
    CHANNEL_OPEN,
    KEYBOARD_STATE,
    VNC_DIRECT,
    DESKTOP_A11Y,
    DESKTOP_WINDOWS,
    DESKTOP_WINDOW,
    DESKTOP_CLIPBOARD,
    DESKTOP_SHELL,
    DESKTOP_FILE,
    INPUT_RELEASE,
    *SCREEN.values(),
)
OPS: Final[dict[str, OpSpec[Any, Any]]] = {spec.name: spec for spec in _ALL}


def check_args(spec: OpSpec[A, Any], args: object) -> A:
    """``args`` as ``spec``'s argument type, or ``invalid_args`` naming the first bad field."""
    return cast(A, check_typeddict(spec.args, args))
