"""The viewer service: check a viewer, open its backend, run the stream, close with a reason.

The backend is a relay channel, except for relays the operator registered as co-located with
the server (``admin add-relay --co-located``) that announce ``direct_vnc``: for those the
server connects to the desktop's x11vnc on loopback itself, and only after completing the RFB
handshake with the desktop's VNC secret (``DirectBackend``). The relay names a port and the
secret (``vnc.direct``, asked once per desktop session and kept until the session leaves the
viewable states); it never names a host, and a port that is not that desktop's x11vnc fails the
handshake before anything is spliced. Opening a viewer costs the relay no ``desktop.status``.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from starlette.websockets import WebSocket

from server.auth.capability import ViewerGrant
from server.boundary.hosts import HostPolicy
from server.config import Settings
from server.control import model as control_model
from server.db.rows import DesktopDirectory, DesktopRow
from server.relays.calls import call
from server.relays.capabilities import DIRECT_VNC
from server.relays.router import RelayRouter
from server.viewer.access import (
    VIEWABLE_STATES,
    MembershipStore,
    ViewerRefused,
    ViewerTarget,
    check_viewer,
    refusal_for_state,
)
from server.viewer.backends import DirectBackend, RelayBackend, VncBackend
from server.viewer.input import InputWatch, PersonInputSink
from server.viewer.registry import DesktopKey, ViewerRegistry, desktop_key
from server.viewer.tunnel import ViewerSession
from server.viewer.view_only import ViewOnlyFilter
from wire import ops
from wire.errors import ChannelCloseCode, ChannelClosedError, CloseCode, ErrorCode, OpError
from wire.ids import RelayId

log = logging.getLogger(__name__)

SUBPROTOCOL = "binary"
VNC_SECRET_LEN = 8
OPEN_TIMEOUT_S = 10.0
STATUS_TIMEOUT_S = 1.5
_UNREACHABLE = frozenset(
    {ErrorCode.RELAY_UNREACHABLE, ErrorCode.TIMEOUT, ErrorCode.CANCELLED, ErrorCode.RELAY_TIMEOUT}
)


@dataclass(frozen=True)
class DirectAddress:
    """Where a co-located desktop's x11vnc listens on loopback, and its VNC secret."""

    port: int
    secret: bytes


def origin_allowed(headers: Any, public_url: str) -> bool:
    """A browser's Origin must be the public URL's, or the request's own allowed Host's.

    The rules are ``server.boundary.hosts.HostPolicy`` (the app's ``InputBoundary`` applies
    them, with ``RELAYDESK_ALLOWED_HOSTS``, before any route); a foreign Host never counts.
    Clients that send no Origin are not browsers; the capability token authorises them.
    """
    return HostPolicy.build(public_url).origin_allowed(headers.get("origin"), headers.get("host"))


def _direct_address(raw: ops.VncDirectResult) -> DirectAddress | None:
    port, secret = raw.get("port"), raw.get("secret")
    if not (isinstance(port, int) and 0 < port < 65536 and isinstance(secret, str)):
        return None
    try:
        key = base64.b64decode(secret, validate=True)
    except ValueError:
        return None
    return DirectAddress(port, key) if len(key) == VNC_SECRET_LEN else None


class ViewerService:
    """Shared state of every viewer stream of this server process."""

    def __init__(
        self,
        settings: Settings,
        store: MembershipStore,
        relays: RelayRouter,
        directory: DesktopDirectory | None,
        control: PersonInputSink | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.relays = relays
        self.control = control
        # Whether viewers' input is looked at (a person's input takes control); only a
        # measurement of what that costs turns it off (benchmarks/bench_takeover.py).
        self.watch_input = True
        self.directory: DesktopDirectory | None = None
        self.registry = ViewerRegistry()
        # Told when a viewer opens and closes, synchronously (they never wait): the
        # recordings' timeline. Arguments: the grant, and True when it opened.
        self.viewer_listeners: list[Callable[[ViewerGrant, bool], None]] = []
        self._direct: dict[DesktopKey, DirectAddress] = {}
        if directory is not None:
            self.use_directory(directory)

    def use_directory(self, directory: DesktopDirectory) -> None:
        """Look desktops up in ``directory`` and follow its changes."""
        self.directory = directory
        directory.add_listener(self.registry.row_changed)
        directory.add_listener(self._forget_direct)

    async def _forget_direct(self, row: DesktopRow) -> None:
        if row.state not in VIEWABLE_STATES:
            self._direct.pop(desktop_key(row), None)

    async def serve(self, websocket: WebSocket, desktop_session_id: str, token: str) -> None:
        """The whole life of one viewer WebSocket."""
        offered = websocket.scope.get("subprotocols", [])
        await websocket.accept(subprotocol=SUBPROTOCOL if SUBPROTOCOL in offered else None)
        try:
            target = await self._admit(websocket, desktop_session_id, token)
            backend = await self._open_backend(target)
        except ViewerRefused as refused:
            log.info("viewer refused (session %s…): %s", desktop_session_id[:8], refused.reason)
            await websocket.close(refused.close_code, refused.reason[:120])
            return
        watch = await self._input_watch(target)
        # An agent's capability watches only: its input never reaches the desktop.
        view_only = None if target.grant.person else ViewOnlyFilter()
        judge = self._judge_for(target)
        session = ViewerSession(websocket, backend, target, judge, watch, view_only)
        self.registry.add(session)
        log.info("viewer opened (session %s…)", desktop_session_id[:8])
        self._tell(target.grant, True)
        try:
            code, reason = await session.run()
        finally:
            self.registry.discard(session)
            self._tell(target.grant, False)
        log.info("viewer closed (session %s…): %d %s", desktop_session_id[:8], code, reason)

    def _tell(self, grant: ViewerGrant, opened: bool) -> None:
        for listener in self.viewer_listeners:
            try:
                listener(grant, opened)
            except Exception:
                log.exception("a viewer listener failed")

    async def _input_watch(self, target: ViewerTarget) -> InputWatch | None:
        """The watch that tells control about this viewer's person (None: nobody listens, or
        the capability is an agent's, view only)."""
        if self.control is None or not self.watch_input or not target.grant.person:
            return None
        user = await self.store.get_user(target.grant.user_id)
        name = user.username if user is not None else "a viewer"
        key = control_model.DesktopKey(target.relay_id, target.row.desktop_session_id)
        return InputWatch(self.control, key, name, target.grant.user_id)

    async def _admit(self, websocket: WebSocket, session_id: str, token: str) -> ViewerTarget:
        if not origin_allowed(websocket.headers, self.settings.public_url):
            raise ViewerRefused(CloseCode.VIEWER_FORBIDDEN, "cross-origin request")
        return await check_viewer(
            secret_key=self.settings.secret_key,
            token=token,
            desktop_session_id=session_id,
            directory=self.directory,
            store=self.store,
            relays=self.relays,
        )

    async def _open_backend(self, target: ViewerTarget) -> VncBackend:
        try:
            if (direct := await self._open_direct(target)) is not None:
                return direct
            link = self.relays.get(target.relay_id)
            channel = await link.open_channel(
                {"type": "vnc", "desktop_session_id": target.row.desktop_session_id},
                OPEN_TIMEOUT_S,
            )
        except OpError as err:
            raise _refusal_for_error(err) from None
        except ChannelClosedError as ended:
            raise ViewerRefused(CloseCode.INTERNAL_ERROR, ended.reason) from None
        return RelayBackend(channel)

    async def _open_direct(self, target: ViewerTarget) -> DirectBackend | None:
        """The direct path if this relay may use it and its desktop authenticates; else None
        (the relay channel serves the viewer)."""
        if DIRECT_VNC not in self.relays.capabilities(target.relay_id):
            return None
        key = desktop_key(target.row)
        address = self._direct.get(key) or await self._ask_direct(target)
        if address is None:
            return None
        try:
            backend = await DirectBackend.connect(address.port, address.secret)
        except ChannelClosedError:
            self._direct.pop(key, None)
            log.warning(
                "relay %s: direct VNC refused for session %s…; using the relay channel",
                target.relay_id,
                target.row.desktop_session_id[:8],
            )
            return None
        self._direct[key] = address
        return backend

    async def _ask_direct(self, target: ViewerTarget) -> DirectAddress | None:
        args = ops.SessionArgs(desktop_session_id=target.row.desktop_session_id)
        try:
            result = await call(
                self.relays, target.relay_id, ops.VNC_DIRECT, args, STATUS_TIMEOUT_S
            )
        except OpError as err:
            if err.code in _UNREACHABLE:
                raise
            return None
        return _direct_address(result)

    async def _relay_holds(self, relay_id: RelayId, session_id: str) -> bool:
        """Whether the relay still runs ``session_id``. ``desktop.holds`` answers at once, even
        while the relay is stopping that desktop (``desktop.status`` waits for the stop, which
        can outlast the viewers' 2 s)."""
        args = ops.SessionArgs(desktop_session_id=session_id)
        result = await call(self.relays, relay_id, ops.DESKTOP_HOLDS, args, STATUS_TIMEOUT_S)
        return result.get("holds") is True

    def _judge_for(self, target: ViewerTarget) -> Any:
        async def judge(ended: ChannelClosedError) -> ViewerRefused:
            return await self._judge(target, ended)

        return judge

    async def _judge(self, target: ViewerTarget, ended: ChannelClosedError) -> ViewerRefused:
        """What a backend end means for the viewer: relay gone, desktop gone, or a VNC hang-up."""
        log.debug("viewer backend ended: %s %s", ended.close_code.name, ended.reason)
        if ended.close_code is ChannelCloseCode.RELAY_GONE:
            return ViewerRefused(CloseCode.RELAY_UNREACHABLE)
        if ended.close_code is ChannelCloseCode.DESKTOP_STOPPED:
            return ViewerRefused(CloseCode.DESKTOP_STOPPED)
        session_id = target.row.desktop_session_id
        row = await self.directory.row(target.relay_id, session_id) if self.directory else None
        if row is not None and (refused := refusal_for_state(row.state)) is not None:
            return refused
        try:
            still_running = await self._relay_holds(target.relay_id, session_id)
        except OpError:
            return ViewerRefused(CloseCode.RELAY_UNREACHABLE)
        if not still_running:
            return ViewerRefused(CloseCode.DESKTOP_STOPPED)
        return ViewerRefused(CloseCode.NORMAL, f"the VNC server ended the stream ({ended.reason})")

    def close_all(self, reason: str) -> None:
        self.registry.end_all(reason)


def _refusal_for_error(err: OpError) -> ViewerRefused:
    if err.code in _UNREACHABLE:
        return ViewerRefused(CloseCode.RELAY_UNREACHABLE)
    if err.code is ErrorCode.NOT_RUNNING:
        return ViewerRefused(CloseCode.DESKTOP_STOPPED)
    if err.code is ErrorCode.PAUSED:
        return ViewerRefused(CloseCode.DESKTOP_PAUSED)
    return ViewerRefused(CloseCode.INTERNAL_ERROR, err.message)
