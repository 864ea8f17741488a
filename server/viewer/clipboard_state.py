"""``GET /vnc/{sid}/{token}/clipboard``: the desktop's CLIPBOARD text for the viewer bridge.

When the person presses Ctrl+V in the viewer, the page sends their clipboard's text to the
desktop over RFB and reads it back here until the desktop holds it; only then does the V press
go out, so the desktop's app pastes the text of that moment (docs/viewing.md). The route is
protected like ``keyboard-state`` (the capability first, then the holder's role and the
relay's visibility) and, as only a person pastes, answers only a person's capability. Never
cached. The relay reads that desktop's own CLIPBOARD (``desktop.clipboard``, op ``get``).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from server.auth.capability import ViewerDenied
from server.db.store import Store
from server.errors import error_response
from server.relays.calls import call
from server.relays.router import RelayRouter
from server.viewer.access import ViewerRefused
from server.viewer.keyboard_state import (
    HEADERS,
    RELAY_TIMEOUT_S,
    answer,
    relay_refusal,
    viewer_grant,
)
from wire import ops
from wire.errors import ErrorCode, OpError, RelaydeskError
from wire.ids import RelayId


def _refused(err: RelaydeskError) -> Response:
    return error_response(err, HEADERS, known=False, text=None)


def clipboard_state_route(store: Store, relays: RelayRouter, secret_key: str) -> Route:
    async def clipboard_state(request: Request) -> Response:
        """``{ok, known, text, truncated}`` for the capability's desktop, or the refusal."""
        try:
            grant = await viewer_grant(store, secret_key, request, person_only=True)
        except (ViewerDenied, ViewerRefused) as err:
            return _refused(err)
        sid = request.path_params["sid"]
        try:
            result = await call(
                relays,
                RelayId(grant.relay_id),
                ops.DESKTOP_CLIPBOARD,
                ops.DesktopClipboardArgs(desktop_session_id=sid, op="get"),
                RELAY_TIMEOUT_S,
            )
        except OpError as err:
            if err.code is ErrorCode.PROTOCOL_ERROR:
                return _refused(OpError(err.code, "malformed clipboard answer", status=502))
            return _refused(relay_refusal(err))
        text = result.get("text", "")
        body = {
            "ok": True,
            "known": True,
            "text": text if isinstance(text, str) else "",
            "truncated": bool(result.get("truncated")),
        }
        return answer(200, body)

    return Route(
        "/vnc/{sid}/{token}/clipboard", clipboard_state, methods=["GET"], name="clipboard-state"
    )
