"""The relay's ops: one small handler per op of ``wire.ops``, dispatched by table.

Every request's arguments are checked against its op's ``TypedDict`` before the handler runs
(``wire.ops.check_args``: a missing, unknown or mistyped field is ``invalid_args`` naming it).
Desktop ops go to a :class:`~relay.backend.DesktopBackend`: the one of the kind the op names,
or the one that holds the op's ``desktop_session_id``; nothing here depends on the kind.
Every op received is logged at debug level as ``op <name>`` (the relay's op log).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, Final, TypeVar

from relay.a11y.service import A11yService
from relay.a11y.settings import A11ySettings
from relay.activity import Activity
from relay.backend import (
    DEFAULT_SLOT,
    DesktopBackend,
    check_revision_target,
    require_row,
    unpaused,
)
from relay.browser.routing import PageRouting
from relay.browser.service import BrowserService
from relay.channels import DesktopChannels, StreamChannel, TargetEnd
from relay.desktop_tools.home_files import HomeFileSettings
from relay.desktop_tools.home_stream import open_file_channel
from relay.desktop_tools.home_worker import HomeFileWorkers
from relay.desktop_tools.service import DesktopTools
from relay.desktop_tools.session import session_of
from relay.desktop_tools.settings import DesktopToolSettings
from relay.recording.service import RelayRecordings
from wire import ops
from wire.browser import DESKTOP_BROWSER, BrowserArgs, BrowserResult
from wire.errors import ChannelCloseCode, ErrorCode, InvalidArgs, OpError
from wire.guard import DIGEST_CAPABILITY
from wire.home_files import DESKTOP_HOME_FILE, HomeFileArgs, HomeFileResult
from wire.ids import ChannelId
from wire.messages import Request
from wire.recording import RECORDING_ACK, RECORDING_SET
from wire.screen_actions import IMAGE_ACTIONS, ScreenAction
from wire.snapshots import (
    DESKTOP_FORK,
    DESKTOP_RESET,
    DESKTOP_SNAPSHOT,
    DESKTOP_SNAPSHOT_DELETE,
    DesktopForkArgs,
    DesktopForkResult,
    DesktopResetArgs,
    DesktopResetResult,
    DesktopSnapshotArgs,
    DesktopSnapshotResult,
    SnapshotDeleteResult,
    SnapshotIdArgs,
)

if TYPE_CHECKING:
    from relay.desktops.snapshots import Snapshots
    from relay.link import ServerLink

log = logging.getLogger(__name__)

A = TypeVar("A")
R = TypeVar("R")
Handler = Callable[["ServerLink", Any], Awaitable[Any]]
Entry = tuple[ops.OpSpec[Any, Any], Handler]
# ``channel.open`` of other target types: (link, channel id, the desktop's status row) → result.
ChannelOpener = Callable[["ServerLink", ChannelId, ops.RelayRow], Awaitable[ops.ChannelOpenResult]]
# keyboard.state is read while the viewer holds key events: bounded, and short.
KEYBOARD_STATE_TIMEOUT_S = 1.5
KEYBOARD_STATE_KEYS: Final = ("num_lock", "caps_lock", "scroll_lock", "source")
# Arguments that name the target desktop of a screen action, never passed on to its backend.
SCREEN_ROUTING_ARGS: Final = frozenset({"desktop_session_id", "kind", "revision_target"})
# What to do about a relay asked for its host's real screen (``local``) without a host helper.
NO_HOST_HELPER: Final = (
    "this relay has no host helper, so it does not share its host's real screen: run "
    "`relaydesk host-helper` in that "
    "screen's session on the relay's host and start the relay with RELAYDESK_HOST_HELPER "
    "set to it (docs/host-helper.md)"
)
# Why a relay may have no backend of a kind.
WHY_NO_BACKEND: Final[dict[str, str]] = {"local": NO_HOST_HELPER}


def _entry(spec: ops.OpSpec[A, R], handler: Callable[[ServerLink, A], Awaitable[R]]) -> Entry:
    """One table row; mypy checks that the handler takes and gives the op's types."""
    return spec, handler


class Handlers:
    """Routes each op to its handler; unknown ops get ``unknown_op``."""

    def __init__(
        self,
        backends: Iterable[DesktopBackend] = (),
        *,
        channel_targets: dict[str, ChannelOpener] | None = None,
        direct_host: str | None = None,
        a11y: A11ySettings | None = None,
        tools: DesktopToolSettings | None = None,
        files: HomeFileSettings | None = None,
        recordings: RelayRecordings | None = None,
        pool: Callable[[], ops.PoolReport] | None = None,
    ) -> None:
        self.a11y = A11yService(a11y or A11ySettings())
        # Windows, clipboard, and opt-in shell and files (relay/desktop_tools).
        self.tools = DesktopTools(tools or DesktopToolSettings.from_env())
        # Files in a desktop's home, on every relay (relay/desktop_tools/home_files.py).
        self.files = files or HomeFileSettings.from_env()
        self.file_workers = HomeFileWorkers(self.files)
        # The desktop's browser over its private DevTools pipe (relay/browser).
        self.browser = BrowserService()
        # desktop.a11y on a browser's pages goes to the browser (relay/browser/routing.py).
        self.routing = PageRouting(self.a11y, self.browser)
        self.backends: dict[str, DesktopBackend] = {b.kind: b for b in backends}
        # The warm pool's report (relay/desktops/pool.py); None: this relay keeps no pool.
        self._pool = pool
        # Set on a relay running beside the server: the server may then reach x11vnc itself.
        self.direct_host = direct_host
        self._channel_targets = channel_targets or {}  # audio (relay/audio.py)
        # Each desktop's VNC channels, closed by its stop before its processes end.
        self.channels = DesktopChannels()
        # When each desktop was last acted on (the idle pause reads it: relay/desktops/idle.py).
        self.activity = Activity()
        self._table: dict[str, Entry] = {
            entry[0].name: entry
            for entry in (
                _entry(ops.PING, self._ping),
                _entry(ops.DESKTOP_START, self._desktop_start),
                _entry(ops.DESKTOP_STATUS, self._desktop_status),
                _entry(ops.DESKTOP_HOLDS, self._desktop_holds),
                _entry(ops.DESKTOP_STOP, self._desktop_stop),
                _entry(ops.DESKTOP_PAUSE, self._desktop_pause),
                _entry(ops.DESKTOP_RESUME, self._desktop_resume),
                _entry(ops.DESKTOP_PROFILES, self._desktop_profiles),
                _entry(ops.DESKTOP_POOL, self._desktop_pool),
                _entry(ops.DESKTOP_APPS, self._desktop_apps),
                _entry(ops.DESKTOP_LAUNCH, self._desktop_launch),
                _entry(ops.DESKTOP_RESET_HOME, self._desktop_reset_home),
                _entry(DESKTOP_SNAPSHOT, self._desktop_snapshot),
                _entry(DESKTOP_SNAPSHOT_DELETE, self._desktop_snapshot_delete),
                _entry(DESKTOP_FORK, self._desktop_fork),
                _entry(DESKTOP_RESET, self._desktop_reset),
                _entry(ops.CHANNEL_OPEN, self._channel_open),
                _entry(ops.KEYBOARD_STATE, self._keyboard_state),
                _entry(ops.VNC_DIRECT, self._vnc_direct),
                _entry(ops.DESKTOP_A11Y, self._desktop_a11y),
                _entry(ops.INPUT_RELEASE, self._input_release),
                _entry(ops.DESKTOP_WINDOWS, self._desktop_windows),
                _entry(ops.DESKTOP_WINDOW, self._desktop_window),
                _entry(ops.DESKTOP_CLIPBOARD, self._desktop_clipboard),
                _entry(ops.DESKTOP_SHELL, self._desktop_shell),
                _entry(ops.DESKTOP_FILE, self._desktop_file),
                _entry(DESKTOP_HOME_FILE, self._desktop_home_file),
                _entry(DESKTOP_BROWSER, self._desktop_browser),
                *self._recording_entries(recordings),
                *(
                    _entry(spec, self._screen_handler(action))
                    for action, spec in ops.SCREEN.items()
                ),
            )
        }

    def _recording_entries(self, recordings: RelayRecordings | None) -> list[Entry]:
        """``recording.set`` and ``recording.ack`` on a relay that records (relay/recording)."""
        self.recordings = recordings
        if recordings is None:
            return []
        return [_entry(RECORDING_SET, recordings.set), _entry(RECORDING_ACK, recordings.ack)]

    async def located_row(self, desktop_session_id: str) -> ops.RelayRow:
        """The row of a running desktop of this relay, else ``not_running``."""
        return (await self._located(desktop_session_id))[1]

    def capabilities(self) -> list[str]:
        caps = ["session_identity"]
        for backend in self.backends.values():
            caps.extend(backend.capabilities())
        if self.direct_host:
            caps.append("direct_vnc")
        if self._pool is not None:
            caps.append(ops.POOL_CAPABILITY)
        if "audio" in self._channel_targets:
            caps.append("audio")
        if self.backends:
            caps.extend(("screen", "screen_guard", DIGEST_CAPABILITY))
            caps.extend(self.tools.capabilities())
        return caps

    async def desktop_rows(self) -> list[ops.RelayRow]:
        return [row for backend in self.backends.values() for row in await backend.rows()]

    async def dispatch(self, link: ServerLink, request: Request) -> Any:
        log.debug("op %s", request.op[:64])
        entry = self._table.get(request.op)
        if entry is None:
            raise OpError(ErrorCode.UNKNOWN_OP, f"unknown op {request.op[:64]!r}")
        spec, handler = entry
        with self.activity.op():
            return await handler(link, ops.check_args(spec, request.args))

    async def aclose(self) -> None:
        for backend in self.backends.values():
            await backend.aclose()

    # -- finding the backend and the desktop ------------------------------------------------

    def _of_kind(self, kind: str) -> DesktopBackend:
        backend = self.backends.get(kind)
        if backend is None:
            why = WHY_NO_BACKEND.get(kind, f"this relay runs no {kind} desktops")
            raise OpError(ErrorCode.UNAVAILABLE, why, {"field": "kind"})
        return backend

    async def _holder(self, desktop_session_id: str) -> DesktopBackend | None:
        for backend in self.backends.values():
            if await backend.holds(desktop_session_id):
                return backend
        return None

    async def _located(self, desktop_session_id: str) -> tuple[DesktopBackend, ops.RelayRow]:
        """The backend and row of a session this relay runs, else ``not_running`` (``paused``
        while it is paused)."""
        backend = await self._holder(desktop_session_id)
        row = await backend.find(desktop_session_id, DEFAULT_SLOT) if backend else None
        if backend is None or row is None:
            raise OpError(ErrorCode.NOT_RUNNING, "no running desktop has this session id")
        return backend, self._acting(unpaused(row))

    async def _targeted(self, args: ops.DesktopTargetArgs) -> DesktopBackend:
        """The backend of ``desktop_session_id``, else of ``kind`` (default ``virtual``)."""
        session_id = args.get("desktop_session_id")
        if session_id is None:
            return self._of_kind(args.get("kind", "virtual"))
        backend = await self._holder(session_id)
        if backend is None:
            raise OpError(ErrorCode.NOT_RUNNING, "no running desktop there; start one first")
        return backend

    # -- ops -----------------------------------------------------------------------------------

    async def _ping(self, link: ServerLink, args: ops.PingArgs) -> ops.PingResult:
        """The empty op: answers at once, echoing ``echo`` (round-trip measurement)."""
        return {"echo": args.get("echo")}

    async def _desktop_start(
        self, link: ServerLink, args: ops.DesktopStartArgs
    ) -> ops.DesktopStartResult:
        return await self._of_kind(args.get("kind", "virtual")).start(args)

    async def _desktop_status(self, link: ServerLink, args: ops.Empty) -> ops.DesktopStatusResult:
        return {"desktops": await self.desktop_rows()}

    async def _desktop_holds(
        self, link: ServerLink, args: ops.SessionArgs
    ) -> ops.DesktopHoldsResult:
        """Whether this relay still runs the session, answered at once: unlike
        ``desktop.status`` it does not wait for a start or stop in progress (a stopping desktop
        is already forgotten)."""
        return {"holds": await self._holder(args["desktop_session_id"]) is not None}

    async def _desktop_stop(
        self, link: ServerLink, args: ops.DesktopStopArgs
    ) -> ops.DesktopStopResult:
        return await self._of_kind(args.get("kind", "virtual")).stop(args)

    async def _desktop_pause(self, link: ServerLink, args: ops.DesktopPauseArgs) -> ops.RelayRow:
        """Freeze every process of the exact desktop (docs/desktops.md, "Pause and resume")."""
        return await self._of_kind(args.get("kind", "virtual")).pause(args, True)

    async def _desktop_resume(self, link: ServerLink, args: ops.DesktopPauseArgs) -> ops.RelayRow:
        """Thaw the exact paused desktop; its idle window starts again."""
        self.activity.touch(args["desktop_session_id"])
        return await self._of_kind(args.get("kind", "virtual")).pause(args, False)

    async def _desktop_profiles(
        self, link: ServerLink, args: ops.Empty
    ) -> ops.DesktopProfilesResult:
        """Every desktop profile of this relay: available, or which programs it misses."""
        return {"profiles": [p for b in self.backends.values() for p in b.profiles()]}

    async def _desktop_pool(self, link: ServerLink, args: ops.Empty) -> ops.PoolReport:
        """The warm pool: ready desktops per profile, hits and misses (empty: no pool)."""
        if self._pool is None:
            return {"geometry": "", "profiles": [], "hits": 0, "misses": 0}
        return self._pool()

    async def _desktop_apps(
        self, link: ServerLink, args: ops.DesktopTargetArgs
    ) -> ops.DesktopAppsResult:
        """The desktop's profile and launchable apps."""
        backend = await self._targeted(args)
        return await backend.apps(args.get("desktop_session_id"), args.get("slot", DEFAULT_SLOT))

    async def _desktop_launch(
        self, link: ServerLink, args: ops.DesktopLaunchArgs
    ) -> ops.DesktopLaunchResult:
        """Start one launchable app (by id) in the desktop."""
        backend = await self._targeted(args)
        slot = args.get("slot", DEFAULT_SLOT)
        self._acting(
            require_row(
                await backend.find(args.get("desktop_session_id"), slot), None, backend.kind
            )
        )
        result = await backend.launch(args.get("desktop_session_id"), slot, args["app"])
        wait_s = args.get("wait_s", 0.0)
        pid = result.get("pid")
        if wait_s > 0 and pid is not None and result.get("accessible", True):
            row = require_row(
                await backend.find(result["desktop_session_id"], slot),
                result["desktop_session_id"],
                backend.kind,
            )
            result["window"] = await self.a11y.launched_window(backend, row, pid, wait_s)
        return result

    async def _desktop_a11y(self, link: ServerLink, args: ops.A11yArgs) -> ops.A11yResult:
        """One accessibility call on one desktop (relay/a11y/service.py; a browser's pages
        through relay/browser/routing.py)."""
        backend, row = await self._tool_target(args)
        return {"result": await self.routing.call(backend, row, args["call"], args["params"])}

    async def _tool_target(
        self, args: ops.DesktopTargetArgs
    ) -> tuple[DesktopBackend, ops.RelayRow]:
        """The backend and row of the running desktop a desktop tool names."""
        backend = await self._targeted(args)
        session_id = args.get("desktop_session_id")
        row = require_row(
            await backend.find(session_id, args.get("slot", DEFAULT_SLOT)), session_id, backend.kind
        )
        return backend, self._acting(row)

    def _acting(self, row: ops.RelayRow) -> ops.RelayRow:
        """The op being dispatched acts on ``row``'s desktop: it is in use (``Activity``)."""
        self.activity.acting(row["desktop_session_id"])
        return row

    async def _desktop_windows(
        self, link: ServerLink, args: ops.DesktopTargetArgs
    ) -> ops.DesktopWindowsResult:
        """The desktop's top-level windows (relay/desktop_tools/windows.py)."""
        return await self.tools.windows(*await self._tool_target(args))

    async def _desktop_window(
        self, link: ServerLink, args: ops.DesktopWindowArgs
    ) -> ops.DesktopWindowResult:
        """Activate, close, maximize, minimize, move or resize one window."""
        return await self.tools.window(*await self._tool_target(args), args)

    async def _desktop_clipboard(
        self, link: ServerLink, args: ops.DesktopClipboardArgs
    ) -> ops.DesktopClipboardResult:
        """Read or set the desktop's CLIPBOARD selection."""
        return await self.tools.clipboard(*await self._tool_target(args), args)

    async def _desktop_shell(
        self, link: ServerLink, args: ops.DesktopShellArgs
    ) -> ops.DesktopShellResult:
        """One ``/bin/sh -c`` command as the desktop's user (opt-in: RELAYDESK_CUA_SHELL)."""
        self.tools.require_shell()
        return await self.tools.shell(*await self._tool_target(args), args)

    async def _desktop_file(
        self, link: ServerLink, args: ops.DesktopFileArgs
    ) -> ops.DesktopFileResult:
        """One file command as the desktop's user (opt-in: RELAYDESK_CUA_SHELL)."""
        self.tools.require_shell()
        return await self.tools.file(*await self._tool_target(args), args)

    async def _desktop_home_file(self, link: ServerLink, args: HomeFileArgs) -> HomeFileResult:
        """List, read, write or delete in the desktop's home, as its user (no opt-in)."""
        session = await session_of(*await self._tool_target(args))
        return await self.file_workers.run(session, args)

    async def _desktop_browser(self, link: ServerLink, args: BrowserArgs) -> BrowserResult:
        """One call on the desktop's browser over its DevTools pipe (relay/browser)."""
        backend, row = await self._tool_target(args)
        return {"result": await self.browser.call(backend, row, args["call"], args["params"])}

    async def _desktop_reset_home(
        self, link: ServerLink, args: ops.SlotArgs
    ) -> ops.DesktopResetHomeResult:
        """Wipe the slot's kept home (refused while a desktop runs there)."""
        backend = self._of_kind(args.get("kind", "virtual"))
        return await backend.reset_home(args.get("slot", DEFAULT_SLOT))

    def _snapshots(self, kind: str) -> Snapshots:
        """The snapshots of ``kind``'s desktops (only desktops of processes have them)."""
        snapshots: Snapshots | None = getattr(self._of_kind(kind), "snapshots", None)
        if snapshots is None:
            raise OpError(
                ErrorCode.UNAVAILABLE, f"{kind} desktops have no snapshots", {"field": "kind"}
            )
        return snapshots

    async def _desktop_snapshot(
        self, link: ServerLink, args: DesktopSnapshotArgs
    ) -> DesktopSnapshotResult:
        """Save the exact desktop's home, profile, geometry and apps (docs/desktops.md)."""
        return await self._snapshots(args.get("kind", "virtual")).snapshot(args)

    async def _desktop_snapshot_delete(
        self, link: ServerLink, args: SnapshotIdArgs
    ) -> SnapshotDeleteResult:
        return {"deleted": await self._snapshots("virtual").delete(args["snapshot_id"])}

    async def _desktop_fork(self, link: ServerLink, args: DesktopForkArgs) -> DesktopForkResult:
        """Start one desktop per slot from a snapshot, each with its own copy of its home."""
        return await self._snapshots("virtual").fork(args)

    async def _desktop_reset(self, link: ServerLink, args: DesktopResetArgs) -> DesktopResetResult:
        """Replace the exact desktop in its slot by a snapshot's state or a fresh start."""
        return await self._snapshots(args.get("kind", "virtual")).reset(args)

    async def _vnc_direct(self, link: ServerLink, args: ops.SessionArgs) -> ops.VncDirectResult:
        """For a server on this host (direct path): the desktop's loopback x11vnc port and VNC
        secret, answered without the lifecycle lock. The server connects only if the operator
        registered this relay as co-located, only to loopback, and splices nothing before the
        secret's handshake succeeded."""
        if not self.direct_host:
            raise OpError(ErrorCode.UNAVAILABLE, "this relay does not offer the direct path")
        session_id = args["desktop_session_id"]
        backend = await self._holder(session_id)
        address = backend.direct(session_id) if backend is not None else None
        if address is None:
            raise OpError(ErrorCode.NOT_RUNNING, "no running virtual desktop has this session id")
        return address

    async def _input_release(
        self, link: ServerLink, args: ops.SessionArgs
    ) -> ops.InputReleaseResult:
        """Stop or a takeover: let go of the buttons and keys the agent left held."""
        backend, row = await self._located(args["desktop_session_id"])
        return {"released": await backend.release_held(row)}

    async def _keyboard_state(self, link: ServerLink, args: ops.SessionArgs) -> ops.KeyboardState:
        """Lock-key LEDs of one running desktop's own display; never starts a desktop."""
        backend, row = await self._located(args["desktop_session_id"])
        try:
            async with asyncio.timeout(KEYBOARD_STATE_TIMEOUT_S):
                state = await backend.keyboard_state(row)
        except TimeoutError:
            raise OpError(ErrorCode.TIMEOUT, "reading the keyboard state timed out") from None
        return {
            "num_lock": state.get("num_lock"),
            "caps_lock": state.get("caps_lock"),
            "scroll_lock": state.get("scroll_lock"),
            "source": state.get("source"),
        }

    def _screen_handler(
        self, action: ScreenAction
    ) -> Callable[[ServerLink, ops.ScreenArgs], Awaitable[ops.ScreenResult]]:
        async def handle(link: ServerLink, args: ops.ScreenArgs) -> ops.ScreenResult:
            return await self.screen(action, args)

        return handle

    async def screen(self, action: ScreenAction, args: ops.ScreenArgs) -> ops.ScreenResult:
        """``screen.<action>``: find the target desktop, check the screenshot's revision target
        is still exactly that desktop, and run the action on it."""
        session_id = args.get("desktop_session_id")
        if session_id is not None:
            backend, row = await self._located(session_id)
        else:
            backend = self._of_kind(args.get("kind", "virtual"))
            row = self._acting(
                require_row(await backend.find(None, DEFAULT_SLOT), None, backend.kind)
            )
        check_revision_target(args.get("revision_target"), row)
        action_args = {k: v for k, v in args.items() if k not in SCREEN_ROUTING_ARGS}
        result = await backend.screen(row, action, action_args)
        if self.recordings is not None and action not in IMAGE_ACTIONS:
            await self.recordings.acted(row["desktop_session_id"])
        return result

    async def _channel_open(
        self, link: ServerLink, args: ops.ChannelOpenArgs
    ) -> ops.ChannelOpenResult:
        channel_id, target = ChannelId(args["channel_id"]), args["target"]
        if channel_id < 0:
            raise InvalidArgs("channel_id", "must be a non-negative integer")
        if target["type"] == "file":  # a download or an upload (relay/desktop_tools/home_stream)
            transfer = target.get("file")
            if transfer is None:
                raise InvalidArgs("target.file", "required by a file channel")
            backend, row = await self._located(target["desktop_session_id"])
            session = await session_of(backend, row)
            return await open_file_channel(
                link,
                channel_id,
                session,
                transfer,
                self.files,
                lambda channel: self.channels.add(row["desktop_session_id"], channel),
            )
        if target["type"] == "recording":  # a finished segment (relay/recording/service.py)
            segment = target.get("segment")
            if segment is None or self.recordings is None:
                raise InvalidArgs("target.segment", "required by a recording channel")
            return await self.recordings.open_channel(
                link, channel_id, target["desktop_session_id"], segment
            )
        if target["type"] == "cdp":  # an agent's CDP connection (relay/browser/endpoint.py)
            backend, row = await self._located(target["desktop_session_id"])
            cdp = await self.browser.client_stream(backend, row)
            channel = StreamChannel(channel_id, link, cdp, cdp.end_reason)
            self.channels.add(row["desktop_session_id"], channel)
            link.start_channel(channel)
            return {"channel_id": channel_id}
        opener = self._channel_targets.get(target["type"])
        if target["type"] != "vnc" and opener is None:
            raise OpError(ErrorCode.UNAVAILABLE, f"this relay streams no {target['type']}")
        backend, row = await self._located(target["desktop_session_id"])
        if opener is not None:
            return await opener(link, channel_id, row)
        stream = await backend.open_stream(row)
        ended = _stream_end(backend, row["desktop_session_id"])
        channel = StreamChannel(channel_id, link, stream, ended)
        self.channels.add(row["desktop_session_id"], channel)
        link.start_channel(channel)
        return {"channel_id": channel_id}


def _stream_end(backend: DesktopBackend, desktop_session_id: str) -> TargetEnd:
    """Why a desktop's VNC stream ended: its desktop is going away, or just this stream.

    A backend forgets a desktop before it stops its processes, so this lock-free question
    tells a stop apart at once (status would wait for the whole stop under the lock).
    """

    async def ended() -> tuple[ChannelCloseCode, str]:
        if not await backend.holds(desktop_session_id):
            return ChannelCloseCode.DESKTOP_STOPPED, "desktop stopped"
        return ChannelCloseCode.TARGET_CLOSED, "target closed the connection"

    return ended
