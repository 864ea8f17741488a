"""``GET /vnc/{sid}/{token}/keyboard-state``: the desktop's lock-key LEDs for the viewer bridge.

The viewer page reads this before the first key press and after focus returns, to align the
remote NumLock with the browser's. It is protected like the viewer stream (the capability is
verified first, then the holder's role and the relay's visibility) and never cached. The relay
answers ``keyboard.state`` only for a desktop it runs with that session id, reading that
desktop's own display; an unknown state is reported as ``null``, never guessed.
"""

from __future__ import annotations

import logging
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from server.auth.capability import ViewerDenied, ViewerGrant, verify
from server.db.records import role_allows
from server.db.store import Store
from server.errors import error_response
from server.json_response import JSONResponse
from server.relays.calls import call
from server.relays.router import RelayRouter
from server.viewer.access import ViewerRefused
from wire import ops
from wire.errors import CloseCode, ErrorCode, OpError, RelaydeskError
from wire.ids import RelayId

log = logging.getLogger(__name__)

# The page holds key events while it waits: a short bound keeps typing responsive.
RELAY_TIMEOUT_S = 2.0
HEADERS = {"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"}
LOCKS = ("num_lock", "caps_lock", "scroll_lock")


def answer(status: int, body: dict[str, Any]) -> JSONResponse:
    return JSONResponse(body, status_code=status, headers=HEADERS)


def _unknown(err: RelaydeskError) -> JSONResponse:
    """The one error body, with the locks unknown (``null``) beside it."""
    return error_response(err, HEADERS, known=False, **dict.fromkeys(LOCKS))


def relay_refusal(err: OpError) -> OpError:
    """The relay's refusal: a desktop that is gone is 410 (the page stops asking), a relay
    that did not answer 504, any other failure of the relay 502."""
    status = {ErrorCode.NOT_RUNNING: 410, ErrorCode.TIMEOUT: 504}.get(err.code, 502)
    return OpError(err.code, err.message, status=status)


def _lock(result: ops.KeyboardState, name: str) -> bool | None:
    value = result.get(name)
    return value if isinstance(value, bool) else None


async def viewer_grant(
    store: Store, secret_key: str, request: Request, *, person_only: bool = False
) -> ViewerGrant:
    """The path's viewer capability, verified, its holder still a ``write`` member of a
    conversation that sees the relay (and a person, with ``person_only``); else
    ``ViewerDenied`` or ``ViewerRefused``."""
    sid, token = request.path_params["sid"], request.path_params["token"]
    grant = verify(secret_key, token, sid)
    role = await store.get_role(grant.conversation_id, grant.user_id)
    visible = await store.is_relay_visible(grant.relay_id, grant.conversation_id)
    if (person_only and not grant.person) or not role_allows(role, "write") or not visible:
        raise ViewerRefused(CloseCode.VIEWER_FORBIDDEN)
    return grant


def keyboard_state_route(store: Store, relays: RelayRouter, secret_key: str) -> Route:
    async def keyboard_state(request: Request) -> Response:
        """The lock states of the capability's desktop, or ``known: false`` with the reason."""
        try:
            grant = await viewer_grant(store, secret_key, request)
        except (ViewerDenied, ViewerRefused) as err:
            return _unknown(err)
        sid = request.path_params["sid"]
        try:
            result = await call(
                relays,
                RelayId(grant.relay_id),
                ops.KEYBOARD_STATE,
                ops.SessionArgs(desktop_session_id=sid),
                RELAY_TIMEOUT_S,
            )
        except OpError as err:
            if err.code is ErrorCode.PROTOCOL_ERROR:
                return _unknown(OpError(err.code, "malformed keyboard state", status=502))
            return _unknown(relay_refusal(err))
        locks = {name: _lock(result, name) for name in LOCKS}
        return answer(200, {"ok": True, "known": locks["num_lock"] is not None, **locks})

    return Route(
        "/vnc/{sid}/{token}/keyboard-state", keyboard_state, methods=["GET"], name="keyboard-state"
    )
