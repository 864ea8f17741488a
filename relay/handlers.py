"""The relay's ops: one small handler per op, dispatched by table."""

from __future__ import annotations

import asyncio
import base64
import logging
import mimetypes
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Protocol

from relay.channels import TargetEnd, TcpChannel
from relay.desktops.config import DEFAULT_NOVNC_DIR
from relay.screen.service import ScreenService
from relay.vnc_target import VncTarget
from wire.errors import ChannelCloseCode, ErrorCode, InvalidArgs, OpError, RfbHandshakeError
from wire.ids import ChannelId
from wire.messages import Request

if TYPE_CHECKING:
    from relay.link import ServerLink
    from relay.local_desktop import LocalDesktop

log = logging.getLogger(__name__)

Handler = Callable[["ServerLink", dict[str, Any]], Awaitable[Any]]
# ``channel.open`` of other target types: (link, channel id, the desktop's status row) → result.
ChannelOpener = Callable[["ServerLink", ChannelId, dict[str, Any]], Awaitable[dict[str, Any]]]
CONNECT_TIMEOUT_S = 5.0
# keyboard.state is read while the viewer holds key events: bounded, and short.
KEYBOARD_STATE_TIMEOUT_S = 1.5
# noVNC files the server may ask for when it has no tree of its own (``novnc.asset``).
NOVNC_ALLOWED_DIRS: Final = ("core/", "vendor/", "app/")
NOVNC_ALLOWED_FILES: Final = frozenset({"vnc.html"})
NOVNC_MAX_FILE: Final = 4 * 1024 * 1024
# Set on a relay running beside the server: the server may then reach x11vnc itself.
# What to do about a relay asked for its host's real screen (``local``) without a host helper.
NO_HOST_HELPER: Final = (
    "this relay has no host helper, so it does not share its host's real screen: run "
    "`relaydesk host-helper` in that "
    "screen's session on the relay's host and start the relay with RELAYDESK_HOST_HELPER "
    "set to it (docs/host-helper.md)"
)


class Desktops(Protocol):
    """What the handlers need of the desktop manager."""

    async def start(
        self,
        *,
        kind: str = ...,
        slot: str = ...,
        geometry: str = ...,
        depth: int = ...,
        audio: bool = ...,
        started_by: str | None = ...,
        apps: list[str] | None = ...,
        profile: str | None = ...,
        persist_home: bool = ...,
    ) -> dict[str, Any]: ...

    async def status(self) -> list[dict[str, Any]]: ...

    def profile_status(self) -> list[dict[str, Any]]: ...

    async def apps(
        self, desktop_session_id: str | None, default: tuple[str, str]
    ) -> dict[str, Any]: ...

    async def launch_app(
        self, desktop_session_id: str | None, default: tuple[str, str], app: object
    ) -> dict[str, Any]: ...

    async def reset_home(self, *, kind: str, slot: str) -> dict[str, Any]: ...

    def holds(self, desktop_session_id: str) -> bool: ...

    def vnc_secret(self, desktop_session_id: str) -> bytes | None: ...

    async def stop(self, *, kind: str, slot: str, desktop_session_id: str) -> dict[str, Any]: ...


class Handlers:
    """Routes each op to its handler; unknown ops get ``unknown_op``."""

    def __init__(
        self,
        desktops: Desktops | None,
        *,
        missing: list[str] | None = None,
        extra_ops: dict[str, Handler] | None = None,
        novnc_dir: Path | None = None,
        direct_host: str | None = None,
        channel_targets: dict[str, ChannelOpener] | None = None,
        local: LocalDesktop | None = None,
        screen: ScreenService | None = None,
    ) -> None:
        self.desktops = desktops
        self.missing = missing or []
        self.novnc_dir = novnc_dir or DEFAULT_NOVNC_DIR
        self.direct_host = direct_host
        # The host helper's local desktop (relay/local_desktop.py), when RELAYDESK_HOST_HELPER
        # is set.
        self.local = local
        # The screen service ``keyboard.state`` reads through: the relay's own (one X
        # connection per display), else the first call creates one.
        self.screen = screen
        self.channel_opens = 0
        self._table: dict[str, Handler] = {
            "ping": self._ping,
            "desktop.start": self._desktop_start,
            "desktop.status": self._desktop_status,
            "desktop.holds": self._desktop_holds,
            "desktop.stop": self._desktop_stop,
            "desktop.profiles": self._desktop_profiles,
            "desktop.apps": self._desktop_apps,
            "desktop.launch": self._desktop_launch,
            "desktop.reset_home": self._desktop_reset_home,
            "channel.open": self._channel_open,
            "novnc.asset": self._novnc_asset,
            "keyboard.state": self._keyboard_state,
            "vnc.direct": self._vnc_direct,
            "screen.local": self._no_host_helper,
            # screen.<action> (relay/screen_ops.py); screen.local when a host helper is set
            **(extra_ops or {}),
        }
        self._channel_targets = channel_targets or {}  # audio (relay/audio.py)

    def capabilities(self) -> list[str]:
        caps = ["session_identity"]
        if self.desktops is not None and not self.missing:
            caps.append("virtual_desktop")
            caps.extend(
                f"profile:{p['name']}" for p in self.desktops.profile_status() if p["available"]
            )
        if (self.novnc_dir / "core").is_dir():
            caps.append("novnc_asset")
        if self.direct_host:
            caps.append("direct_vnc")
        if self.local is not None:
            caps.append("local_desktop")
        if "audio" in self._channel_targets:
            caps.append("audio")
        if "screen.click" in self._table:
            caps.extend(("screen", "screen_guard"))
        return caps

    async def desktop_rows(self) -> list[dict[str, Any]]:
        rows = await self.desktops.status() if self.desktops is not None else []
        return rows + (await self.local.rows() if self.local is not None else [])

    async def dispatch(self, link: ServerLink, request: Request) -> Any:
        handler = self._table.get(request.op)
        if handler is None:
            raise OpError(ErrorCode.UNKNOWN_OP, f"unknown op {request.op[:64]!r}")
        return await handler(link, request.args)

    async def _vnc_direct(self, link: ServerLink, args: dict[str, Any]) -> dict[str, Any]:
        """For a server on this host (direct path): the desktop's loopback x11vnc port and VNC
        secret. The server connects only if the operator registered this relay as co-located,
        only to loopback, and splices nothing before the secret's handshake succeeded."""
        if not self.direct_host:
            raise OpError(ErrorCode.UNAVAILABLE, "this relay does not offer the direct path")
        row = await self._find_desktop(args.get("desktop_session_id"))
        secret = self.desktops.vnc_secret(row["desktop_session_id"]) if self.desktops else None
        if secret is None or row.get("kind") == "local":
            raise OpError(ErrorCode.NOT_RUNNING, "no running virtual desktop has this session id")
        return {"port": int(row["vnc_port"]), "secret": base64.b64encode(secret).decode()}

    async def _no_host_helper(self, link: ServerLink, args: dict[str, Any]) -> dict[str, Any]:
        raise OpError(ErrorCode.UNAVAILABLE, NO_HOST_HELPER)

    async def _ping(self, link: ServerLink, args: dict[str, Any]) -> dict[str, Any]:
        """The empty op: answers at once, echoing ``echo`` (round-trip measurement)."""
        return {"echo": args.get("echo")}

    def _manager(self) -> Desktops:
        if self.desktops is None or self.missing:
            missing = ", ".join(self.missing) or "desktop support"
            raise OpError(
                ErrorCode.UNAVAILABLE, f"this relay cannot run desktops; missing: {missing}"
            )
        return self.desktops

    async def _desktop_start(self, link: ServerLink, args: dict[str, Any]) -> dict[str, Any]:
        allowed = {
            "kind", "slot", "geometry", "depth", "audio", "started_by", "profile", "persist_home",
        }  # fmt: skip
        unknown = sorted(set(args) - allowed)
        if unknown:
            raise InvalidArgs(unknown[0], "unknown argument")
        if args.get("kind") == "local":
            if self.local is None:
                raise OpError(ErrorCode.UNAVAILABLE, NO_HOST_HELPER, {"field": "kind"})
            return await self.local.start(args)
        return await self._manager().start(**args)

    async def _desktop_profiles(self, link: ServerLink, args: dict[str, Any]) -> dict[str, Any]:
        """Every desktop profile of this relay: available, or which programs it misses."""
        return {"profiles": self._manager().profile_status()}

    async def _desktop_apps(self, link: ServerLink, args: dict[str, Any]) -> dict[str, Any]:
        """``{desktop_session_id?, kind?, slot?}`` → the desktop's profile and launchable apps."""
        return await self._manager().apps(*_desktop_target(args))

    async def _desktop_launch(self, link: ServerLink, args: dict[str, Any]) -> dict[str, Any]:
        """``{desktop_session_id?, kind?, slot?, app}``: start one launchable app (by id)."""
        return await self._manager().launch_app(*_desktop_target(args), args.get("app"))

    async def _desktop_reset_home(self, link: ServerLink, args: dict[str, Any]) -> dict[str, Any]:
        """``{kind, slot}``: wipe the slot's kept home (refused while a desktop runs there)."""
        return await self._manager().reset_home(
            kind=str(args.get("kind", "virtual")), slot=str(args.get("slot", "main"))
        )

    async def _desktop_status(self, link: ServerLink, args: dict[str, Any]) -> dict[str, Any]:
        return {"desktops": await self.desktop_rows()}

    async def _desktop_holds(self, link: ServerLink, args: dict[str, Any]) -> dict[str, Any]:
        """Whether this relay still runs ``desktop_session_id``, answered at once: unlike
        ``desktop.status`` it does not wait for a start or stop in progress (a stopping desktop
        is already forgotten)."""
        session_id = args.get("desktop_session_id")
        if not isinstance(session_id, str) or not session_id:
            raise InvalidArgs("desktop_session_id", "required")
        held = self.desktops is not None and self.desktops.holds(session_id)
        if not held and self.local is not None:
            held = any(
                row.get("desktop_session_id") == session_id for row in await self.local.rows()
            )
        return {"holds": held}

    async def _desktop_stop(self, link: ServerLink, args: dict[str, Any]) -> dict[str, Any]:
        session_id = args.get("desktop_session_id")
        if not isinstance(session_id, str) or not session_id:
            raise InvalidArgs("desktop_session_id", "required")
        if self.local is not None and args.get("kind") == "local":
            return await self.local.stop(args)
        return await self._manager().stop(
            kind=str(args.get("kind", "virtual")),
            slot=str(args.get("slot", "main")),
            desktop_session_id=session_id,
        )

    async def _find_desktop(self, session_id: object) -> dict[str, Any]:
        for row in await self.desktop_rows():
            if row.get("desktop_session_id") == session_id:
                return row
        raise OpError(ErrorCode.NOT_RUNNING, "no running desktop has this session id")

    async def _keyboard_state(self, link: ServerLink, args: dict[str, Any]) -> dict[str, Any]:
        """Lock-key LEDs of one running desktop's own display; never starts a desktop."""
        row = await self._find_desktop(args.get("desktop_session_id"))
        if self.local is not None and row.get("kind") == "local":
            return await self.local.keyboard_state(row, KEYBOARD_STATE_TIMEOUT_S)
        display = row.get("display")
        if not isinstance(display, str):
            raise OpError(ErrorCode.UNAVAILABLE, "this desktop has no display to read")
        if self.screen is None:
            self.screen = ScreenService()
            self._owns_screen = True
        await self.screen.bind(display, str(row["desktop_session_id"]))
        try:
            async with asyncio.timeout(KEYBOARD_STATE_TIMEOUT_S):
                state = await self.screen.run(display, "keyboard_state", {})
        except TimeoutError:
            raise OpError(ErrorCode.TIMEOUT, "reading the keyboard state timed out") from None
        return {key: state.get(key) for key in ("num_lock", "caps_lock", "scroll_lock", "source")}

    async def aclose(self) -> None:
        """Release the display connections ``keyboard.state`` opened (if it owns them)."""
        if self.screen is not None and getattr(self, "_owns_screen", False):
            screen, self.screen = self.screen, None
            await screen.aclose()

    async def _channel_open(self, link: ServerLink, args: dict[str, Any]) -> dict[str, Any]:
        # Counted and logged before any check: tests assert that refused viewers never get here.
        self.channel_opens += 1
        log.info("channel.open requested (%d so far)", self.channel_opens)
        channel_id = args.get("channel_id")
        target = args.get("target")
        if not isinstance(channel_id, int) or isinstance(channel_id, bool) or channel_id < 0:
            raise InvalidArgs("channel_id", "must be a non-negative integer")
        kind = target.get("type") if isinstance(target, dict) else None
        if isinstance(target, dict) and (opener := self._channel_targets.get(str(kind))):
            row = await self._find_desktop(target.get("desktop_session_id"))
            return await opener(link, ChannelId(channel_id), row)
        if not isinstance(target, dict) or target.get("type") != "vnc":
            raise InvalidArgs("target", "must be {type: 'vnc', desktop_session_id}")
        row = await self._find_desktop(target.get("desktop_session_id"))
        if self.local is not None and row.get("kind") == "local":
            return await self.local.open_channel(link, ChannelId(channel_id), row)
        port = int(row["vnc_port"])
        secret = self.desktops.vnc_secret(row["desktop_session_id"]) if self.desktops else None
        if secret is None:
            raise OpError(ErrorCode.NOT_RUNNING, "no running desktop has this session id")
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                target = await VncTarget.open("127.0.0.1", port, secret)
        except (OSError, TimeoutError, RfbHandshakeError) as err:
            raise OpError(
                ErrorCode.UNAVAILABLE, "the desktop's VNC server does not answer"
            ) from err
        target_end = self._desktop_end(row)
        link.start_channel(TcpChannel(ChannelId(channel_id), link, target, target_end))
        return {"channel_id": channel_id}

    def _desktop_end(self, row: dict[str, Any]) -> TargetEnd:
        """Why a desktop's x11vnc hung up: its desktop is going away, or just this stream.

        The manager forgets a desktop before it stops its processes, so a lock-free probe
        tells a stop apart at once (status would wait for the whole stop under the lock).
        """
        probe = getattr(self.desktops, "probe", None)

        async def ended() -> tuple[ChannelCloseCode, str]:
            if probe is not None:
                result = await probe(row.get("kind", "virtual"), row.get("slot", "main"))
                if result.get("desktop_session_id") != row["desktop_session_id"]:
                    return ChannelCloseCode.DESKTOP_STOPPED, "desktop stopped"
            return ChannelCloseCode.TARGET_CLOSED, "target closed the connection"

        return ended

    async def _novnc_asset(self, link: ServerLink, args: dict[str, Any]) -> dict[str, Any]:
        """One file of the relay's noVNC tree, for a server that has none."""
        path = novnc_asset_path(args.get("path"))
        root = self.novnc_dir.resolve()
        file = (root / path).resolve()
        if not file.is_relative_to(root) or not file.is_file():
            raise OpError(ErrorCode.NOT_FOUND, "no such noVNC file")
        data = await asyncio.to_thread(_read_limited, file)
        content_type = mimetypes.guess_type(path)[0] or "application/octet-stream"
        # Named the way websockify names it; the server canonicalises backend headers.
        return {"headers": {"Content-type": content_type},
                "data": base64.b64encode(data).decode("ascii")}  # fmt: skip


def _desktop_target(args: dict[str, Any]) -> tuple[str | None, tuple[str, str]]:
    """(desktop_session_id or None, (kind, slot)) of an op that names one desktop."""
    session_id = args.get("desktop_session_id")
    if session_id is not None and not isinstance(session_id, str):
        raise InvalidArgs("desktop_session_id", "must be a string")
    kind = str(args.get("kind", "virtual"))
    return session_id, ("virtual" if kind == "docker" else kind, str(args.get("slot", "main")))


def novnc_asset_path(raw: object) -> str:
    """``raw`` if it is an allowed relative noVNC path (no traversal), else ``invalid_args``."""
    if not isinstance(raw, str) or not raw or len(raw) > 256:
        raise InvalidArgs("path", "must be a relative path")
    parts = raw.split("/")
    if "\\" in raw or "\x00" in raw or any(p in ("", ".", "..") for p in parts):
        raise InvalidArgs("path", "must be a plain relative path")
    if raw not in NOVNC_ALLOWED_FILES and not raw.startswith(NOVNC_ALLOWED_DIRS):
        raise InvalidArgs("path", "outside core/, vendor/, app/ and vnc.html")
    return raw


def _read_limited(file: Path) -> bytes:
    if file.stat().st_size > NOVNC_MAX_FILE:
        raise OpError(ErrorCode.LIMIT_REACHED, "noVNC file too large")
    return file.read_bytes()
