"""``/api/v1/conversations/{conversation_id}/cdp/{relay}/{kind}/{slot}``: the Chrome DevTools
Protocol of the desktop's own browser, for agent frameworks (docs/browser.md, "The CDP
endpoint").

- ``WS {base}`` — the browser target's protocol, as on a browser's own DevTools WebSocket.
- ``GET {base}/json/version`` (and ``…/json/version/``) — the discovery document a client
  reads before it connects (Playwright's ``connect_over_cdp`` with an ``http(s)`` URL):
  ``webSocketDebuggerUrl`` is this server's own WebSocket path above.

Both take an API token (``Authorization: Bearer rdk_…``) of a member with role ``write``
(a non-member: 404, as for a conversation that does not exist; a ``read`` member: 403), and
the running desktop in the slot. The socket is held under the stream caps and the revocation
watch, and a person's Stop closes it (4430). Connect and disconnect are audit rows.
"""

from __future__ import annotations

import logging
from typing import Final

from starlette.requests import HTTPConnection, Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket

from server import errors
from server.actions import audit
from server.actions.context import ActionContext
from server.actions.desktop import running_row
from server.actions.errors import relay_error
from server.actions.invoke import ActionRunner, request_id_from
from server.actions.routes import REQUEST_ID_HEADER
from server.auth import errors as auth_errors
from server.auth.errors import AuthError, Unauthorized
from server.auth.revocation import Access, Credential, Watch
from server.auth.streams import StreamGuard, refuse_socket, run_watched
from server.boundary.limits import TooManyStreams
from server.cdp.session import CdpSession, Closing, close_quietly
from server.control.gate import DesktopTarget
from server.db.records import role_allows
from server.db.store import Store
from server.doors.admission import admit, bearer
from server.json_response import JSONResponse
from wire.errors import CloseCode, ErrorCode, OpError, RelaydeskError

log = logging.getLogger(__name__)

BASE: Final = "/api/v1/conversations/{conversation_id}/cdp/{relay}/{kind}/{slot}"
SOURCE: Final = "cdp"
OPEN_TIMEOUT_S: Final = 30.0
CONNECT_OP: Final = "desktop.browser.cdp_connect"
DISCONNECT_OP: Final = "desktop.browser.cdp_disconnect"


def _refusal(err: RelaydeskError) -> Response:
    if isinstance(err, AuthError):
        return auth_errors.error_response(err)
    return errors.error_response(err)


def _socket_url(conn: HTTPConnection) -> str:
    """This connection's WebSocket URL (``ws``/``wss`` as the request came)."""
    scheme = "wss" if conn.url.scheme in ("https", "wss") else "ws"
    path = BASE.format(**conn.path_params)
    return str(conn.url.replace(scheme=scheme, path=path, query="", fragment=""))


class CdpEndpoint:
    """The discovery route and the WebSocket, over the actions' parts."""

    def __init__(self, store: Store, streams: StreamGuard, actions: ActionRunner) -> None:
        self.store = store
        self.streams = streams
        self.actions = actions

    def routes(self) -> list[BaseRoute]:
        return [
            Route(f"{BASE}/json/version", self.version, methods=["GET"]),
            Route(f"{BASE}/json/version/", self.version, methods=["GET"]),
            WebSocketRoute(BASE, self.socket),
        ]

    async def _admitted(self, conn: HTTPConnection) -> tuple[ActionContext, DesktopTarget]:
        """The caller (a ``write`` member's token) and the running desktop the path names."""
        authorization = conn.headers.get("authorization")
        if authorization is None:
            raise Unauthorized("this endpoint takes an API token: 'Authorization: Bearer rdk_…'")
        admitted = await admit(self.store, conn, bearer(authorization))
        if not role_allows(admitted.role, "write"):
            raise OpError(ErrorCode.FORBIDDEN, "the browser's CDP endpoint needs role write here")
        where = admitted.target
        request_id = request_id_from(conn.headers.get(REQUEST_ID_HEADER))
        ctx = ActionContext(
            self.actions.parts,
            admitted.principal,
            where.conversation_id,
            admitted.role,
            SOURCE,
            request_id,
        )
        row = await running_row(ctx, {"relay": where.relay, "kind": where.kind, "slot": where.slot})
        ctx.desktop_session_id = row.desktop_session_id
        return ctx, DesktopTarget.of_row(row)

    async def version(self, request: Request) -> Response:
        try:
            await self._admitted(request)
        except RelaydeskError as err:
            return _refusal(err)
        body = {
            "Browser": "relaydesk",
            "Protocol-Version": "1.3",
            "webSocketDebuggerUrl": _socket_url(request),
        }
        return JSONResponse(body, headers=dict(errors.NO_STORE))

    async def socket(self, websocket: WebSocket) -> None:
        try:
            ctx, target = await self._admitted(websocket)
            held = self.streams.admit(
                websocket, Credential.of(ctx.principal), Access(ctx.conversation_id, "write")
            )
        except (RelaydeskError, TooManyStreams) as err:
            await self._refuse(websocket, err)
            return
        try:
            await self._open(websocket, ctx, target, held.watch)
        finally:
            held.release()

    async def _refuse(self, websocket: WebSocket, err: RelaydeskError) -> None:
        log.info("cdp websocket refused: %s", err.message)
        if isinstance(err, AuthError):
            await websocket.send_denial_response(auth_errors.error_response(err))
        else:
            await refuse_socket(websocket, err)

    async def _open(
        self, websocket: WebSocket, ctx: ActionContext, target: DesktopTarget, watch: Watch
    ) -> None:
        where = {"type": "cdp", "desktop_session_id": target.desktop_session_id}
        try:
            channel = await ctx.relays.get(ctx.relay_id).open_channel(where, OPEN_TIMEOUT_S)
        except OpError as err:
            await audit.record(ctx, CONNECT_OP, err.code.value, err.message)
            await self._refuse(websocket, relay_error(err))
            return
        await websocket.accept()
        await audit.record(ctx, CONNECT_OP, "ok")
        session = CdpSession(websocket, channel, ctx, target)
        code, reason = int(CloseCode.NORMAL), "closed"
        try:
            served = self._served(session, ctx, target)
            await run_watched(websocket, watch, served, CloseCode.UNAUTHORIZED, grace_s=0)
        except Closing as end:
            code, reason = end.close_code, end.reason
        except OpError as err:  # Stop, while the connection was open
            code, reason = CloseCode.STOPPED_BY_USER, f"{err.code.value}: {err.message}"
        finally:
            await channel.close()
            await close_quietly(websocket, code, reason)
            await audit.record(ctx, DISCONNECT_OP, "ok", reason)

    async def _served(self, session: CdpSession, ctx: ActionContext, target: DesktopTarget) -> None:
        """The session, cancelled by a person's Stop (``stopped_by_user``)."""
        async with ctx.parts.control.inflight.track(target.key, ctx.principal.user_id):
            await session.serve()
