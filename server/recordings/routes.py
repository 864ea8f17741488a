"""The recordings routes (docs/recording.md, docs/http-api.md):

- ``GET {base}`` — the conversation's recordings, newest first (role ``read``);
- ``GET {base}/{recording_id}`` — one recording and its timeline (``read``; audited);
- ``GET {base}/{recording_id}/video`` — the video as one file (MP4 or WebM), with HTTP Range
  (``read``; audited once per watch: the request without a range or from byte 0);
- ``GET {base}/{recording_id}/trajectory`` — the trajectory export, a zip (``read``; audited);
- ``DELETE {base}/{recording_id}`` — delete it (``owner``; audited).

``base`` is ``/api/v1/conversations/{conversation_id}/recordings``. A recording belongs to the
conversation it was turned on in; from any other it is ``404 not_found``, like an unknown id.
"""

from __future__ import annotations

import asyncio
import re
from typing import Final

from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import BaseRoute, Route

from server.actions import audit
from server.actions.context import ActionContext
from server.actions.invoke import ActionRunner, request_id_from
from server.auth.dependencies import Authenticator
from server.auth.errors import AuthError
from server.auth.errors import error_response as auth_error_response
from server.auth.scopes import scope_refusal, scoped_role
from server.db.records import Role, role_allows
from server.errors import error_response
from server.json_response import JSONResponse
from server.recordings.export import ExportParams, export_params, trajectory_zip
from server.recordings.files import Recording
from server.recordings.service import RecordingService, wall_ms
from server.recordings.timeline import timeline, window
from server.recordings.video import joined_video, media_type
from wire.errors import ErrorCode, InvalidArgs, OpError, RelaydeskError
from wire.recording import check_recording_id

BASE: Final = "/api/v1/conversations/{conversation_id}/recordings"
SOURCES: Final = {"cookie": "web", "token": "api"}
NO_STORE: Final = {"Cache-Control": "no-store"}
# One byte range (or an open-ended one): what a video player asks for.
RANGE: Final = re.compile(r"bytes=(\d{0,18})-(\d{0,18})")
CONVERSATION: Final = re.compile(r"[A-Za-z0-9_-]{1,32}")


class RecordingRoutes:
    def __init__(
        self, auth: Authenticator, actions: ActionRunner, recordings: RecordingService
    ) -> None:
        self.auth = auth
        self.actions = actions
        self.recordings = recordings

    def routes(self) -> list[BaseRoute]:
        one = f"{BASE}/{{recording_id}}"
        return [
            Route(BASE, self.listing, methods=["GET"]),
            Route(one, self.show, methods=["GET"]),
            Route(one, self.delete, methods=["DELETE"]),
            Route(f"{one}/video", self.video, methods=["GET"]),
            Route(f"{one}/trajectory", self.trajectory, methods=["GET"]),
        ]

    async def _member(self, request: Request, role: Role) -> ActionContext:
        """The caller as a member of the path's conversation with ``role`` at least."""
        principal = await self.auth.authenticate(request)
        conversation_id = request.path_params["conversation_id"]
        if not CONVERSATION.fullmatch(conversation_id):
            raise InvalidArgs("conversation_id", "must be a conversation id")
        ctx = ActionContext(
            self.actions.parts,
            principal,
            conversation_id,
            "read",
            SOURCES[principal.via],
            request_id_from(request.headers.get("X-Request-ID")),
        )
        if (why := scope_refusal(principal, conversation_id, role)) is not None:
            raise OpError(ErrorCode.FORBIDDEN, f"recordings: {why}")
        held = scoped_role(
            principal, conversation_id, await ctx.store.get_role(conversation_id, principal.user_id)
        )
        if not role_allows(held, role):
            raise OpError(ErrorCode.FORBIDDEN, f"recordings need role {role} here")
        ctx.role = held or role
        return ctx

    async def _recording(self, ctx: ActionContext, request: Request) -> Recording:
        recording_id = check_recording_id(request.path_params["recording_id"])
        recording = await asyncio.to_thread(self.recordings.files.load, recording_id)
        if recording is None or recording.conversation_id != ctx.conversation_id:
            raise OpError(ErrorCode.NOT_FOUND, "no such recording in this conversation")
        ctx.desktop_session_id = recording.desktop_session_id
        return recording

    async def listing(self, request: Request) -> Response:
        try:
            ctx = await self._member(request, "read")
            found = await asyncio.to_thread(
                lambda: [
                    r
                    for r in self.recordings.files.all()
                    if r.conversation_id == ctx.conversation_id
                ]
            )
        except AuthError as err:
            return auth_error_response(err)
        except RelaydeskError as err:
            return error_response(err)
        found.sort(key=lambda r: r.start_ms, reverse=True)
        summaries = []
        for recording in found:
            summary = recording.summary()
            summary["actors"] = await self._actors(recording)
            summaries.append(summary)
        return JSONResponse({"ok": True, "recordings": summaries}, headers=NO_STORE)

    async def _events(self, recording: Recording) -> list[dict[str, object]]:
        now = wall_ms()
        since, until = window(recording, now)
        rows = await self.actions.parts.store.session_audit(
            recording.relay_id, recording.desktop_session_id, since, until
        )
        return timeline(recording, rows, now)

    async def _actors(self, recording: Recording) -> list[str]:
        """Who acted on the desktop while it was recorded."""
        events = await self._events(recording)
        return sorted({str(e["actor"]) for e in events if e["kind"] != "lifecycle"} - {"-"})

    async def show(self, request: Request) -> Response:
        try:
            ctx = await self._member(request, "read")
            recording = await self._recording(ctx, request)
        except AuthError as err:
            return auth_error_response(err)
        except RelaydeskError as err:
            return error_response(err)
        events = await self._events(recording)
        await audit.record(ctx, "recording.view", "ok", recording.recording_id)
        body = {"ok": True, "recording": recording.summary(), "timeline": events}
        return JSONResponse(body, headers=NO_STORE)

    async def video(self, request: Request) -> Response:
        try:
            ctx = await self._member(request, "read")
            recording = await self._recording(ctx, request)
            first = _range_start(request.headers.get("range"))
            path = await asyncio.to_thread(joined_video, self.recordings.files, recording)
            if path is None:
                raise OpError(ErrorCode.NOT_FOUND, "this recording has no video yet")
        except AuthError as err:
            return auth_error_response(err)
        except RelaydeskError as err:
            return error_response(err)
        if first in (None, 0):
            await audit.record(ctx, "recording.watch", "ok", recording.recording_id)
        return FileResponse(
            path, media_type=media_type(recording), headers={"Cache-Control": "private"}
        )

    async def trajectory(self, request: Request) -> Response:
        try:
            ctx = await self._member(request, "read")
            recording = await self._recording(ctx, request)
            params: ExportParams = export_params(request.query_params)
            events = await self._events(recording)
            data = await asyncio.to_thread(
                trajectory_zip, self.recordings.files, recording, events, params
            )
        except AuthError as err:
            return auth_error_response(err)
        except RelaydeskError as err:
            return error_response(err)
        await audit.record(ctx, "recording.export", "ok", recording.recording_id)
        name = f"{recording.recording_id}-trajectory.zip"
        headers = {**NO_STORE, "Content-Disposition": f'attachment; filename="{name}"'}
        return Response(data, media_type="application/zip", headers=headers)

    async def delete(self, request: Request) -> Response:
        try:
            ctx = await self._member(request, "owner")
            recording = await self._recording(ctx, request)
            if recording.active:
                raise OpError(
                    ErrorCode.BUSY,
                    "the desktop is still recorded: turn it off (desktop_record) first",
                    status=409,
                )
        except AuthError as err:
            return auth_error_response(err)
        except RelaydeskError as err:
            return error_response(err)
        await asyncio.to_thread(self.recordings.files.delete, recording.recording_id)
        await audit.record(ctx, "recording.delete", "ok", recording.recording_id)
        return JSONResponse({"ok": True, "deleted": recording.recording_id}, headers=NO_STORE)


def _range_start(header: str | None) -> int | None:
    """The first byte a ``Range`` header asks for; ``invalid_args`` naming ``Range`` when it
    is not one ``bytes=`` range."""
    if header is None:
        return None
    match = RANGE.fullmatch(header.strip())
    if match is None or not (match.group(1) or match.group(2)):
        raise OpError(
            ErrorCode.INVALID_ARGS,
            "Range: must be one byte range, e.g. bytes=0-1023",
            {"field": "Range"},
            status=416,
        )
    start, end = match.group(1), match.group(2)
    if start and end and int(end) < int(start):
        raise OpError(
            ErrorCode.INVALID_ARGS, "Range: ends before it starts", {"field": "Range"}, status=416
        )
    return int(start) if start else None


def recording_routes(
    auth: Authenticator, actions: ActionRunner, recordings: RecordingService | None
) -> list[BaseRoute]:
    """The recordings routes (none on a server that keeps no recordings)."""
    return [] if recordings is None else RecordingRoutes(auth, actions, recordings).routes()
