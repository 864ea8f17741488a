"""``/api/v1/conversations/{conversation_id}/cua/{relay}/{kind}/{slot}``: Cua's computer-server
protocol for one desktop (docs/cua.md).

``POST …/cmd``, ``WS …/ws``, ``GET …/commands`` and ``GET …/status``, framed as Cua's own server
frames them. A request is admitted before anything runs: an API token (``Authorization: Bearer
rdk_…`` or Cua's ``X-API-Key: rdk_…``), membership of the conversation (else 404, as for one
that does not exist), a sane target (relay name or id, kind ``virtual``, ``docker`` or
``local``, a slot), and for ``/cmd`` the body through the server's input boundary.

``?guard=off`` on the base URL turns the session's click guard off. Cua's client appends
``/cmd`` and ``/ws`` to its base URL as text, so a base URL ending in ``?guard=off`` reaches
this endpoint as the base path with the query ``guard=off/cmd``: both spellings are served.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from server import errors
from server.actions.invoke import ActionRunner, request_id_from
from server.actions.routes import REQUEST_ID_HEADER
from server.auth import errors as auth_errors
from server.auth.errors import AuthError, Unauthorized
from server.auth.revocation import Access, Credential, Watch
from server.auth.streams import StreamGuard, refuse_socket, run_watched, until_revoked
from server.boundary.body import read_capped
from server.boundary.limits import TooManyStreams
from server.cua import protocol
from server.cua.call import CuaCall
from server.cua.commands import COMMANDS, listing, missing_params
from server.db.store import Store
from server.doors.admission import Admission, Sessions, Target, admit, bearer
from server.doors.call import DoorSession
from server.relays.router import RelayRouter
from wire.errors import (
    CloseCode,
    ErrorCode,
    InvalidArgs,
    OpError,
    RelaydeskError,
    UnsupportedMediaType,
)
from wire.jsonbody import is_json_media_type, parse_json_object

log = logging.getLogger(__name__)

BASE: Final = "/api/v1/conversations/{conversation_id}/cua/{relay}/{kind}/{slot}"
API_KEY_HEADER: Final = "x-api-key"
SHELL_CAPABILITY: Final = "shell"
MAX_WS_MESSAGE: Final = 1 << 20


@dataclass(frozen=True)
class CuaAdmitted(Admission):
    """An admitted request: who, where, which session, guard on or off."""

    guard: bool


def _token(conn: HTTPConnection) -> str:
    authorization = conn.headers.get("authorization")
    if authorization is not None:
        return bearer(authorization)
    api_key = conn.headers.get(API_KEY_HEADER)
    if api_key:
        return api_key.strip()
    raise Unauthorized(
        "this endpoint takes an API token: 'Authorization: Bearer rdk_…' or 'X-API-Key: rdk_…'"
    )


def _query(conn: HTTPConnection) -> tuple[bool, str | None]:
    """(guard on?, the endpoint named in the query when the client appended it there)."""
    guard = conn.query_params.get("guard", "on")
    value, _, suffix = guard.partition("/")
    if value not in ("on", "off"):
        raise InvalidArgs("guard", "must be on or off")
    return value == "on", suffix or None


async def _admit(store: Store, conn: HTTPConnection, guard: bool) -> CuaAdmitted:
    admitted = await admit(store, conn, _token(conn))
    return CuaAdmitted(
        admitted.principal, admitted.role, admitted.target, admitted.session_key, guard
    )


def _refusal(err: RelaydeskError) -> Response:
    if isinstance(err, AuthError):
        return auth_errors.error_response(err)
    return errors.error_response(err)


def _unknown(name: str) -> JSONResponse:
    """Cua's answer to an unknown command (its client falls back on anything else)."""
    message = protocol.unknown_command(name, COMMANDS)
    body = {
        "detail": message,
        "ok": False,
        "error": {"code": ErrorCode.INVALID_ARGS.value, "message": message, "field": "command"},
    }
    return JSONResponse(body, status_code=400, headers=dict(errors.NO_STORE))


class CuaEndpoint:
    """The routes, and the sessions Cua clients keep between their commands."""

    def __init__(
        self,
        max_body_bytes: int,
        store: Store,
        streams: StreamGuard,
        relays: RelayRouter,
        actions: ActionRunner,
    ) -> None:
        self.max_body_bytes = max_body_bytes
        self.store = store
        self.streams = streams
        self.relays = relays
        self.actions = actions
        self._sessions = Sessions(DoorSession)

    def routes(self) -> list[BaseRoute]:
        return [
            Route(f"{BASE}/cmd", self.cmd, methods=["POST"]),
            Route(f"{BASE}/commands", self.commands, methods=["GET"]),
            Route(f"{BASE}/status", self.status, methods=["GET"]),
            Route(BASE, self.suffixed, methods=["GET", "POST"]),
            WebSocketRoute(f"{BASE}/ws", self.ws),
            WebSocketRoute(BASE, self.ws_suffixed),
        ]

    def session(self, admitted: CuaAdmitted) -> DoorSession:
        return self._sessions.of(admitted)

    # -- HTTP ---------------------------------------------------------------------------

    async def suffixed(self, request: Request) -> Response:
        """The base path with ``?guard=off/<endpoint>`` (a client's base URL with a query)."""
        try:
            _, suffix = _query(request)
        except RelaydeskError as err:
            return _refusal(err)
        routes = {
            ("POST", "cmd"): self.cmd,
            ("GET", "commands"): self.commands,
            ("GET", "status"): self.status,
        }
        route = routes.get((request.method, suffix or ""))
        if route is None:
            return _refusal(OpError(ErrorCode.NOT_FOUND, "no such Cua endpoint"))
        return await route(request)

    async def _admitted(self, request: Request) -> CuaAdmitted:
        guard, _ = _query(request)
        return await _admit(self.store, request, guard)

    async def cmd(self, request: Request) -> Response:
        try:
            admitted = await self._admitted(request)
            command, params = await self._command_body(request)
        except RelaydeskError as err:
            return _refusal(err)
        name = protocol.resolve(command)
        if name not in COMMANDS:
            return _unknown(command)
        try:
            reply = await self._watched_run(request, admitted, name, params)
        except RelaydeskError as err:
            return _refusal(err)
        return Response(
            protocol.data_line(reply),
            media_type="text/plain",
            headers={"Cache-Control": "no-cache"},
        )

    async def _watched_run(
        self, request: Request, admitted: CuaAdmitted, name: str, params: Mapping[str, Any]
    ) -> dict[str, Any]:
        """The command under the stream caps (a command may run long: a shell), cancelled with
        ``Unauthorized`` as soon as the token is revoked or its user disabled."""
        access = Access(admitted.target.conversation_id, "read")
        credential = Credential.of(admitted.principal)
        with self.streams.held(request, credential, access) as watch:
            reply = await until_revoked(watch, self.run(request, admitted, name, params))
        if reply is None:
            raise Unauthorized(f"access revoked: {watch.reason}")
        return reply

    async def _command_body(self, request: Request) -> tuple[str, dict[str, Any]]:
        content_type = request.headers.get("content-type")
        if content_type is None or not is_json_media_type(content_type):
            raise UnsupportedMediaType()
        body = parse_json_object(await read_capped(request, self.max_body_bytes))
        return _command_of(body)

    async def commands(self, request: Request) -> Response:
        try:
            admitted = await self._admitted(request)
        except RelaydeskError as err:
            return _refusal(err)
        shell = await self._has_shell(request, admitted)
        offered = listing(shell, admitted.role)
        return JSONResponse(offered, headers=dict(errors.NO_STORE))

    async def status(self, request: Request) -> Response:
        try:
            admitted = await self._admitted(request)
        except RelaydeskError as err:
            return _refusal(err)
        relay = await _visible_relay(self.store, admitted.target)
        connected = relay is not None and self.relays.is_connected(relay)
        features = ["screen", "accessibility", "clipboard", "windows", "guard"]
        if relay is not None and SHELL_CAPABILITY in self.relays.capabilities(relay):
            features.append("shell")
        body = {
            "status": "ok",
            "os_type": "linux",
            "features": features,
            "relaydesk": {
                "relay_connected": connected,
                "kind": admitted.target.kind,
                "slot": admitted.target.slot,
                "guard": admitted.guard,
            },
        }
        return JSONResponse(body, headers=dict(errors.NO_STORE))

    async def _has_shell(self, request: Request, admitted: CuaAdmitted) -> bool:
        relay = await _visible_relay(self.store, admitted.target)
        return relay is not None and SHELL_CAPABILITY in self.relays.capabilities(relay)

    # -- commands ---------------------------------------------------------------------------

    async def run(
        self, conn: HTTPConnection, admitted: CuaAdmitted, name: str, params: Mapping[str, Any]
    ) -> dict[str, Any]:
        """One known command's reply (``success`` true or false; never raises)."""
        command = COMMANDS[name]
        call = CuaCall(
            self.actions,
            admitted.principal,
            admitted.target,
            self.session(admitted),
            request_id_from(conn.headers.get(REQUEST_ID_HEADER)),
            guard=admitted.guard,
        )
        try:
            missing = missing_params(command, params)
            if missing is not None:
                raise InvalidArgs(missing, "required")
            # An input command also says whether it visibly took effect (docs/cua.md).
            return protocol.success({**await command.run(call, params), **call.verdict()})
        except OpError as err:
            return protocol.failure(err)
        except Exception:
            log.exception("cua command %s failed", name)
            return protocol.failure(errors.internal_error())

    # -- WebSocket -------------------------------------------------------------------------

    async def ws_suffixed(self, websocket: WebSocket) -> None:
        try:
            _, suffix = _query(websocket)
        except RelaydeskError:
            suffix = None
        if suffix != "ws":
            await websocket.close(code=1008)
            return
        await self.ws(websocket)

    async def ws(self, websocket: WebSocket) -> None:
        """One Cua client's socket: admitted once, under the stream caps, and closed (4001)
        as soon as its token is revoked or its user disabled; each command re-checks the
        token first, so none runs after a revocation."""
        try:
            guard, _ = _query(websocket)
            admitted = await _admit(self.store, websocket, guard)
        except RelaydeskError as err:
            log.info("cua websocket refused: %s", err.message)
            await websocket.close(code=1008)
            return
        streams = self.streams
        access = Access(admitted.target.conversation_id, "read")
        try:
            held = streams.admit(websocket, Credential.of(admitted.principal), access)
        except TooManyStreams as err:
            await refuse_socket(websocket, err)
            return
        try:
            await websocket.accept()
            work = self._serve_ws(websocket, admitted, held.watch)
            await run_watched(websocket, held.watch, work, CloseCode.UNAUTHORIZED, grace_s=0)
        finally:
            held.release()

    async def _serve_ws(self, websocket: WebSocket, admitted: CuaAdmitted, watch: Watch) -> None:
        confirm = self.streams.watch.confirm
        try:
            while True:
                text = await websocket.receive_text()
                if not await confirm(watch):
                    return  # revoked: the caller closes the socket with the reason
                reply = await self._ws_reply(websocket, admitted, text)
                await websocket.send_text(json.dumps(reply, ensure_ascii=False))
        except (WebSocketDisconnect, asyncio.CancelledError):
            return
        except RuntimeError:
            # A binary frame, or the connection went away mid-reply.
            with contextlib.suppress(RuntimeError):
                await websocket.close(code=1003)

    async def _ws_reply(
        self, websocket: WebSocket, admitted: CuaAdmitted, text: str
    ) -> dict[str, Any]:
        if len(text) > MAX_WS_MESSAGE:
            return {"success": False, "error": f"message larger than {MAX_WS_MESSAGE} bytes"}
        try:
            command, params = _command_of(parse_json_object(text.encode("utf-8", "replace")))
        except RelaydeskError as err:
            return {"success": False, "error": f"Invalid JSON: {err.message}"}
        if command == "authenticate":
            # Cua's cloud handshake: the connection is already authenticated by its headers.
            return {"success": True, "message": "Authentication successful"}
        name = protocol.resolve(command)
        if name not in COMMANDS:
            return {"success": False, "error": protocol.unknown_command(command, COMMANDS)}
        return await self.run(websocket, admitted, name, params)


def _command_of(body: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    command = body.get("command")
    if not isinstance(command, str) or not command:
        raise InvalidArgs("command", "required (a command name)")
    params = body.get("params") or {}
    if not isinstance(params, dict):
        raise InvalidArgs("params", "must be an object")
    return command, params


async def _visible_relay(store: Store, target: Target) -> Any:
    for relay in await store.relays_visible_in(target.conversation_id):
        if target.relay in (relay.name, relay.relay_id):
            return relay.relay_id
    return None
