"""``/api/v1/conversations/{conversation_id}/computer-use/{door}/{relay}/{kind}/{slot}``: the
model vendors' computer-use tools executed verbatim on one desktop (docs/computer-use.md).

``GET …/tool`` answers the tool definition to send the model; ``POST`` takes one tool call's
input as the model emitted it and answers what the model expects back. Input that does not fit
the tool (an unknown action, a missing field, a point off the display) is 400 naming the field,
in the door's own shape as well; a refusal by the desktop (a changed screen, a takeover, Stop)
is a tool error the model reads and can act on.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from server import errors
from server.actions.invoke import ActionRunner, request_id_from
from server.actions.routes import REQUEST_ID_HEADER
from server.auth import errors as auth_errors
from server.auth.errors import AuthError, Unauthorized
from server.auth.revocation import Access, Credential
from server.auth.streams import StreamGuard, until_revoked
from server.boundary.body import read_capped
from server.boundary.limits import TooManyStreams
from server.computer_use import anthropic, openai
from server.computer_use.session import Admitted, DoorCall, Session, admit
from server.computer_use.tool_errors import did_you_mean, for_model
from server.control.approvals import SafetyApprovals
from server.db.store import Store
from server.doors.admission import Sessions
from wire.errors import InvalidArgs, OpError, RelaydeskError, UnsupportedMediaType
from wire.jsonbody import is_json_media_type, parse_json_object

log = logging.getLogger(__name__)

ROOT: Final = "/api/v1/conversations/{conversation_id}/computer-use"
TARGET: Final = "{relay}/{kind}/{slot}"
ANTHROPIC: Final = f"{ROOT}/anthropic/{TARGET}"
OPENAI: Final = f"{ROOT}/openai/{TARGET}"
EFFECT_HEADER: Final = "X-Relaydesk-Effect"
Answer = dict[str, Any]
Door = Callable[[DoorCall, Mapping[str, Any]], Awaitable[Answer]]


def _refusal(err: RelaydeskError, **extra: Any) -> Response:
    if isinstance(err, AuthError):
        return auth_errors.error_response(err)
    return errors.error_response(err, **extra)


def anthropic_error(err: OpError) -> Answer:
    return {"content": [{"type": "text", "text": for_model(err)}], "is_error": True}


class ComputerUseEndpoint:
    """Both doors' routes, and the sessions their callers keep between tool calls."""

    def __init__(
        self,
        max_body_bytes: int,
        store: Store,
        streams: StreamGuard,
        actions: ActionRunner,
        approvals: SafetyApprovals | None = None,
    ) -> None:
        self.max_body_bytes = max_body_bytes
        self.store = store
        self.streams = streams
        self.actions = actions
        self.approvals = approvals
        self.sessions = Sessions(Session)

    def routes(self) -> list[BaseRoute]:
        return [
            Route(f"{ANTHROPIC}/tool", self.anthropic_tool, methods=["GET"]),
            Route(ANTHROPIC, self.anthropic_call, methods=["POST"]),
            Route(f"{OPENAI}/tool", self.openai_tool, methods=["GET"]),
            Route(OPENAI, self.openai_call, methods=["POST"]),
        ]

    # -- tool definitions ------------------------------------------------------------------

    async def _display(self, request: Request) -> tuple[int, int]:
        admitted = await admit(self.store, request)
        call = self._call(request, admitted)
        return (await call.display()).shown

    async def anthropic_tool(self, request: Request) -> Response:
        try:
            version = request.query_params.get("version", anthropic.VERSIONS[0])
            if version not in anthropic.VERSIONS:
                raise InvalidArgs("version", f"must be one of {', '.join(anthropic.VERSIONS)}")
            shown = await self._display(request)
        except RelaydeskError as err:
            return _refusal(err)
        tool = anthropic.tool_definition(version, shown)
        headers = {**errors.NO_STORE, "X-Anthropic-Beta": anthropic.BETAS[version]}
        return JSONResponse(tool, headers=headers)

    async def openai_tool(self, request: Request) -> Response:
        try:
            kind = request.query_params.get("type", openai.TOOL_TYPES[0])
            if kind not in openai.TOOL_TYPES:
                raise InvalidArgs("type", f"must be one of {', '.join(openai.TOOL_TYPES)}")
            shown = await self._display(request)
        except RelaydeskError as err:
            return _refusal(err)
        tool = openai.tool_definition(shown, kind)
        return JSONResponse(tool, headers=dict(errors.NO_STORE))

    # -- tool calls ------------------------------------------------------------------------

    def _call(self, request: Request, admitted: Admitted) -> DoorCall:
        request_id = request_id_from(request.headers.get(REQUEST_ID_HEADER))
        session = self.sessions.of(admitted)
        return DoorCall(
            self.actions,
            admitted.principal,
            admitted.target,
            session,
            request_id,
            declared=admitted.declared,
            approvals=self.approvals,
        )

    async def _body(self, request: Request) -> dict[str, Any]:
        content_type = request.headers.get("content-type")
        if content_type is None or not is_json_media_type(content_type):
            raise UnsupportedMediaType()
        return parse_json_object(await read_capped(request, self.max_body_bytes))

    async def anthropic_call(self, request: Request) -> Response:
        async def door(call: DoorCall, body: Mapping[str, Any]) -> Answer:
            outcome = await anthropic.run(call, anthropic.tool_input(body))
            return {"content": outcome.content(), "is_error": False}

        def check(body: Mapping[str, Any]) -> None:
            action = anthropic.tool_input(body).get("action")
            if not isinstance(action, str) or not action:
                raise InvalidArgs("action", "required: the action of the tool call's input")
            if action not in anthropic.ACTIONS:
                raise InvalidArgs("action", did_you_mean(action, anthropic.ACTIONS))

        return await self._tool_call(request, check, door, anthropic_error)

    async def openai_call(self, request: Request) -> Response:
        return await self._tool_call(request, openai.check, openai.run, openai.error_item)

    async def _tool_call(
        self,
        request: Request,
        check: Callable[[Mapping[str, Any]], None],
        door: Door,
        tool_error: Callable[[OpError], Answer],
    ) -> Response:
        try:
            admitted = await admit(self.store, request)
            body = await self._body(request)
            check(body)
        except InvalidArgs as err:
            return _refusal(err, **tool_error(err))
        except RelaydeskError as err:
            return _refusal(err)
        call = self._call(request, admitted)
        try:
            answer = await self._watched(request, admitted, lambda: door(call, body))
        except (InvalidArgs, TooManyStreams) as err:  # the caller's fault: not a tool result
            return _refusal(err, **tool_error(err))
        except Unauthorized as err:
            return _refusal(err)
        except OpError as err:
            answer = tool_error(err)
        except Exception:
            log.exception("computer-use call failed")
            answer = tool_error(errors.internal_error())
        headers = dict(errors.NO_STORE)
        if call.effect is not None:  # also for a builder whose tool result carries no text
            headers[EFFECT_HEADER] = call.effect
        return JSONResponse(answer, headers=headers)

    async def _watched(
        self, request: Request, admitted: Admitted, work: Callable[[], Awaitable[Answer]]
    ) -> Answer:
        """``work`` under the stream caps (``TooManyStreams`` at a cap, before it starts),
        cancelled as soon as the token is revoked."""
        access = Access(admitted.target.conversation_id, "read")
        with self.streams.held(request, Credential.of(admitted.principal), access) as watch:
            answer = await until_revoked(watch, work())
        if answer is None:
            raise Unauthorized(f"access revoked: {watch.reason}")
        return answer
