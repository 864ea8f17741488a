"""The file routes: uploads into and downloads from a running desktop's home as byte streams,
resumable by offset (docs/files.md).

- ``POST {base}/upload?path=P&offset=N&exists=rename`` — the body is the file's bytes from
  ``N`` (``Content-Length`` required); the file is ``N + Content-Length`` bytes. Role
  ``write``; an agent passes the control gate (a person's takeover refuses it, Stop ends
  it). An upload cut midway keeps what arrived: ``GET {base}/upload?path=P`` answers how much
  (``offset``), and a POST from there finishes it. ``exists``: ``rename`` (default: a copy
  ``name (1).ext``, never an overwrite), ``replace``, or ``refuse``.
- ``GET {base}/download?path=P&offset=N`` — the file's bytes from ``N``. Role ``read``.

``base`` is ``/api/v1/conversations/{conversation_id}/files/{relay}/{kind}/{slot}``; a
``desktop_session_id`` query parameter names the exact desktop instead (the viewer's Files
panel knows its session, not its slot).
Confinement, the size limit and the refusals are the home file actions' (403
``path_outside_home``, 413 ``file_too_large``, 409 ``offset_mismatch``).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any, Final
from urllib.parse import quote

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import BaseRoute, Route

from server.actions.context import ActionContext
from server.actions.desktop_files import refuse_hidden
from server.actions.invoke import ActionRunner, request_id_from
from server.auth.dependencies import Authenticator
from server.auth.errors import AuthError
from server.auth.errors import error_response as auth_error_response
from server.control.gate import DesktopTarget, agent_input
from server.errors import error_response
from server.files.transfer import LineChannel, admit, open_transfer, record
from server.json_response import JSONResponse
from wire import home_files
from wire.errors import ErrorCode, InvalidArgs, OpError, RelaydeskError
from wire.frames import Payload
from wire.home_files import DESKTOP_HOME_FILE, HomeFileArgs

SESSION_ID: Final = re.compile(r"[A-Za-z0-9_-]{1,64}")
BASE: Final = "/api/v1/conversations/{conversation_id}/files/{relay}/{kind}/{slot}"
EXISTS: Final = ("rename", "replace", "refuse")
SOURCES: Final = {"cookie": "web", "token": "api"}
NO_STORE: Final = {"Cache-Control": "no-store"}
# Beyond the request timeout: a partial upload's size is one small file operation.
PARTIAL_EXTRA_S: Final = 25.0


def _path(request: Request) -> str:
    path = request.query_params.get("path")
    if not path:
        raise InvalidArgs("path", "required: a path in the desktop's home")
    home_files.check_home_file_args({"op": "delete", "path": path})  # the path's own rules
    return path


def _offset(request: Request) -> int:
    raw = request.query_params.get("offset", "0")
    if not raw.isdigit() or len(raw) > 18:
        raise InvalidArgs("offset", "must be a whole number of bytes ≥ 0")
    return int(raw)


def _length(request: Request) -> int:
    raw = request.headers.get("content-length", "")
    if not raw.isdigit() or len(raw) > 18:
        raise OpError(
            ErrorCode.INVALID_ARGS,
            "Content-Length: required (the body's size)",
            {"field": "Content-Length"},
            status=411,
        )
    return int(raw)


def _where(request: Request) -> dict[str, Any]:
    """The desktop: the relay's ``{kind}/{slot}``, or exactly ``desktop_session_id``."""
    params = request.path_params
    where = {"relay": params["relay"], "kind": params["kind"], "slot": params["slot"]}
    session = request.query_params.get("desktop_session_id")
    if session is not None:
        if not SESSION_ID.fullmatch(session):
            raise InvalidArgs("desktop_session_id", "must be a desktop_session_id")
        where["desktop_session_id"] = session
    return where


def _attachment(path: str) -> str:
    name = path.rpartition("/")[2] or "download"
    return f"attachment; filename*=UTF-8''{quote(name, safe='')}"


class FileRoutes:
    """The file routes over the actions' parts (the same members, gate and audit)."""

    def __init__(self, auth: Authenticator, actions: ActionRunner) -> None:
        self.auth = auth
        self.actions = actions

    def routes(self) -> list[BaseRoute]:
        return [
            Route(f"{BASE}/upload", self.upload, methods=["POST"]),
            Route(f"{BASE}/upload", self.partial, methods=["GET"]),
            Route(f"{BASE}/download", self.download, methods=["GET"]),
        ]

    async def _context(self, request: Request) -> ActionContext:
        principal = await self.auth.authenticate(request)
        request_id = request_id_from(request.headers.get("X-Request-ID"))
        return ActionContext(
            self.actions.parts, principal, "", "read", SOURCES[principal.via], request_id
        )

    async def upload(self, request: Request) -> Response:
        try:
            ctx = await self._context(request)
        except AuthError as err:
            return auth_error_response(err)
        path = ""
        try:
            path, offset, length = _path(request), _offset(request), _length(request)
            exists = request.query_params.get("exists", "rename")
            if exists not in EXISTS:
                raise InvalidArgs("exists", f"must be one of {', '.join(EXISTS)}")
            row = await admit(ctx, request.path_params["conversation_id"], "write", _where(request))
            transfer = {
                "op": "upload",
                "path": path,
                "offset": offset,
                "length": offset + length,
                "exists": exists,
            }
            async with agent_input(ctx, DesktopTarget.of_row(row)) as grant:
                lines = await open_transfer(ctx, row, transfer)
                try:
                    await _pump_body(request, lines)
                    result = await lines.line()
                finally:
                    await lines.close()
                grant.acted("desktop_file_upload")  # never the path
        except RelaydeskError as err:
            failed = err if isinstance(err, OpError) else OpError(err.code, err.message)
            if ctx.conversation_id:
                await record(ctx, "desktop.file_upload", path, failed)
            return error_response(err)
        await record(ctx, "desktop.file_upload", str(result["path"]))
        body = {"ok": True, "desktop_session_id": row.desktop_session_id, **result}
        return JSONResponse(body, headers=NO_STORE)

    async def partial(self, request: Request) -> Response:
        try:
            ctx = await self._context(request)
        except AuthError as err:
            return auth_error_response(err)
        try:
            path = _path(request)
            row = await admit(ctx, request.path_params["conversation_id"], "write", _where(request))
            args: HomeFileArgs = {
                "desktop_session_id": row.desktop_session_id,
                "op": "partial",
                "path": path,
            }
            answer = await ctx.relay_call(DESKTOP_HOME_FILE, args, PARTIAL_EXTRA_S)
        except RelaydeskError as err:
            return error_response(err)
        return JSONResponse(
            {"ok": True, "path": answer["path"], "offset": answer["offset"]}, headers=NO_STORE
        )

    async def download(self, request: Request) -> Response:
        try:
            ctx = await self._context(request)
        except AuthError as err:
            return auth_error_response(err)
        path = ""
        try:
            path, offset = _path(request), _offset(request)
            row = await admit(ctx, request.path_params["conversation_id"], "read", _where(request))
            refuse_hidden(ctx.role, path)
            transfer = {"op": "download", "path": path, "offset": offset}
            lines = await open_transfer(ctx, row, transfer)
        except RelaydeskError as err:
            if ctx.conversation_id:
                failed = err if isinstance(err, OpError) else OpError(err.code, err.message)
                await record(ctx, "desktop.file_download", path, failed)
            return error_response(err)
        landed, size = str(lines.header["path"]), int(lines.header["size"])
        await record(ctx, "desktop.file_download", landed)
        headers = {
            **NO_STORE,
            "Content-Length": str(size - offset),
            "Content-Disposition": _attachment(landed),
            "X-Relaydesk-File-Size": str(size),
        }
        return StreamingResponse(
            _stream(lines), headers=headers, media_type="application/octet-stream"
        )


async def _pump_body(request: Request, lines: LineChannel) -> None:
    """The request body into the channel, one piece at a time (each waits for credit)."""
    try:
        async for piece in request.stream():
            if piece:
                await lines.channel.write(piece)
    except ClientDisconnect:
        raise OpError(
            ErrorCode.CANCELLED, "the upload was cut: resume it from its offset", status=400
        ) from None


async def _stream(lines: LineChannel) -> AsyncIterator[Payload]:
    try:
        async for piece in lines.data():
            yield bytes(piece)
    finally:
        await lines.close()


def file_routes(auth: Authenticator, actions: ActionRunner) -> list[BaseRoute]:
    """The file routes (upload, its partial, download)."""
    return FileRoutes(auth, actions).routes()
