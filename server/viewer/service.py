"""The viewer service: check a viewer, open its backend, run the stream, close with a reason.

The backend is a relay channel unless the relay registered a direct VNC address (capability
``direct_vnc`` and a ``direct: {host, port}`` on the desktop's row): then the server connects
itself. Which path is used comes from that registration, never from a guess.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from starlette.websockets import WebSocket

from server.config import Settings
from server.inventory.rows import DesktopDirectory
from server.relays.hub import RelayHub
from server.viewer.access import (
    MembershipStore,
    ViewerRefused,
    ViewerTarget,
    check_viewer,
    refusal_for_state,
)
from server.viewer.backends import BackendEnded, RelayBackend, TcpBackend, VncBackend
from server.viewer.registry import ViewerRegistry
from server.viewer.tunnel import ViewerSession
from wire.errors import ChannelCloseCode, CloseCode, ErrorCode, OpError
from wire.ids import RelayId

log = logging.getLogger(__name__)

SUBPROTOCOL = "binary"
DIRECT_CAPABILITY = "direct_vnc"
OPEN_TIMEOUT_S = 10.0
STATUS_TIMEOUT_S = 1.5
_UNREACHABLE = frozenset(
    {ErrorCode.RELAY_UNREACHABLE, ErrorCode.TIMEOUT, ErrorCode.CANCELLED, ErrorCode.RELAY_TIMEOUT}
)


@dataclass(frozen=True)
class DirectAddress:
    host: str
    port: int


def origin_allowed(headers: Any, public_url: str) -> bool:
    """A browser's Origin must name this server (its Host, or the configured public URL).

    Clients that send no Origin are not browsers and cannot be driven by another site; the
    capability token is what authorises them.
    """
    origin = headers.get("origin")
    if origin is None:
        return True
    allowed = {headers.get("host", "").lower()}
    if public_url:
        allowed.add(urlsplit(public_url).netloc.lower())
    return urlsplit(origin).netloc.lower() in allowed - {""}


def _direct_address(raw: object) -> DirectAddress | None:
    if not isinstance(raw, dict):
        return None
    host, port = raw.get("host"), raw.get("port")
    if isinstance(host, str) and host and isinstance(port, int) and 0 < port < 65536:
        return DirectAddress(host, port)
    return None


class ViewerService:
    """Shared state of every viewer stream of this server process."""

    def __init__(
        self,
        settings: Settings,
        store: MembershipStore,
        hub: RelayHub,
        directory: DesktopDirectory | None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.hub = hub
        self.directory: DesktopDirectory | None = None
        self.registry = ViewerRegistry()
        if directory is not None:
            self.use_directory(directory)

    def use_directory(self, directory: DesktopDirectory) -> None:
        """Look desktops up in ``directory`` and follow its changes."""
        self.directory = directory
        directory.add_listener(self.registry.row_changed)

    async def serve(self, websocket: WebSocket, desktop_session_id: str, token: str) -> None:
        """The whole life of one viewer WebSocket."""
        offered = websocket.scope.get("subprotocols", [])
        await websocket.accept(subprotocol=SUBPROTOCOL if SUBPROTOCOL in offered else None)
        try:
            target = await self._admit(websocket, desktop_session_id, token)
            backend = await self._open_backend(target)
        except ViewerRefused as refused:
            log.info("viewer refused (session %s…): %s", desktop_session_id[:8], refused.reason)
            await websocket.close(refused.code, refused.reason[:120])
            return
        session = ViewerSession(websocket, backend, target, self._judge_for(target))
        self.registry.add(session)
        log.info("viewer opened (session %s…)", desktop_session_id[:8])
        try:
            code, reason = await session.run()
        finally:
            self.registry.discard(session)
        log.info("viewer closed (session %s…): %d %s", desktop_session_id[:8], code, reason)

    async def _admit(self, websocket: WebSocket, session_id: str, token: str) -> ViewerTarget:
        if not origin_allowed(websocket.headers, self.settings.public_url):
            raise ViewerRefused(CloseCode.VIEWER_FORBIDDEN, "cross-origin request")
        return await check_viewer(
            secret_key=self.settings.secret_key,
            token=token,
            desktop_session_id=session_id,
            directory=self.directory,
            store=self.store,
            relays=self.hub,
        )

    async def _open_backend(self, target: ViewerTarget) -> VncBackend:
        try:
            direct = await self._direct_address(target)
            if direct is not None:
                return await TcpBackend.connect(direct.host, direct.port)
            link = self.hub.get(target.relay_id)
            channel = await link.open_channel(
                {"type": "vnc", "desktop_session_id": target.row.desktop_session_id},
                OPEN_TIMEOUT_S,
            )
        except OpError as err:
            raise _refusal_for_error(err) from None
        except BackendEnded as ended:
            raise ViewerRefused(CloseCode.INTERNAL_ERROR, ended.reason) from None
        return RelayBackend(channel)

    async def _direct_address(self, target: ViewerTarget) -> DirectAddress | None:
        """The registered direct address of the desktop, if its relay announced one."""
        if DIRECT_CAPABILITY not in self.hub.capabilities(target.relay_id):
            return None
        on_row = _direct_address(getattr(target.row, "direct", None))
        if on_row is not None:
            return on_row
        row = await self._relay_row(target.relay_id, target.row.desktop_session_id)
        return _direct_address(row.get("direct")) if row else None

    async def _relay_row(self, relay_id: RelayId, session_id: str) -> dict[str, Any] | None:
        """The relay's own status row of ``session_id`` (the relay answers after any stop)."""
        result = await self.hub.request(relay_id, "desktop.status", {}, STATUS_TIMEOUT_S)
        for row in result.get("desktops", []):
            if isinstance(row, dict) and row.get("desktop_session_id") == session_id:
                return row
        return None

    async def _relay_holds(self, relay_id: RelayId, session_id: str) -> bool:
        """Whether the relay still runs ``session_id``. ``desktop.holds`` answers at once, even
        while the relay is stopping that desktop (``desktop.status`` waits for the stop, which
        can outlast the viewers' 2 s); a relay without it is asked for its status."""
        try:
            result = await self.hub.request(
                relay_id, "desktop.holds", {"desktop_session_id": session_id}, STATUS_TIMEOUT_S
            )
        except OpError as err:
            if err.code is not ErrorCode.UNKNOWN_OP:
                raise
            return await self._relay_row(relay_id, session_id) is not None
        return bool(result.get("holds")) if isinstance(result, dict) else False

    def _judge_for(self, target: ViewerTarget) -> Any:
        async def judge(ended: BackendEnded) -> ViewerRefused:
            return await self._judge(target, ended)

        return judge

    async def _judge(self, target: ViewerTarget, ended: BackendEnded) -> ViewerRefused:
        """What a backend end means for the viewer: relay gone, desktop gone, or a VNC hang-up."""
        if ended.code is ChannelCloseCode.RELAY_GONE:
            return ViewerRefused(CloseCode.RELAY_UNREACHABLE)
        if ended.code is ChannelCloseCode.DESKTOP_STOPPED:
            return ViewerRefused(CloseCode.DESKTOP_STOPPED)
        session_id = target.row.desktop_session_id
        row = await self.directory.get_by_session(session_id) if self.directory else None
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
    return ViewerRefused(CloseCode.INTERNAL_ERROR, err.message)
