"""Every error answer of the server's HTTP API: one status per code, one body.

The body is ``{ok: false, error: {code, message, field?, hint?, …}}`` for every route (actions,
chat, auth, events, the input boundary, the viewer's keyboard state). The status is the error's
code's (``wire.errors.HTTP_STATUS``) unless the error carries its own (413, 415, 429, 401 for
an expired viewer token). Only the detail keys in :data:`PUBLIC_DETAILS` reach a client.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import Response

from server.json_response import JSONResponse
from wire.errors import ErrorCode, OpError, RelaydeskError, http_status

NO_STORE: Final = {"Cache-Control": "no-store"}
# Detail keys that may reach a client; anything else a relay adds stays on the server.
PUBLIC_DETAILS: Final = frozenset(
    {
        "field",
        "hint",
        "current_session_id",
        "actions",
        "max_desktops",
        "limit",
        "desktop_session_id",
        # the stale-screen guard's figures and where to look next
        "difference",
        "threshold",
        "screen_revision",
        "latest_screen_revision",
        "reason",
        # what to do next (accessibility tools), and the apps there are
        "suggestion",
        # when an agent may try again (takeover_active, stopped_by_user)
        "retry_after_s",
        "running",
        "checks",
    }
)


def status_of(err: RelaydeskError) -> int:
    """The HTTP status of ``err``."""
    return http_status(err)


def error_body(err: RelaydeskError) -> dict[str, Any]:
    """``{ok: false, error: {code, message, …public details}}``."""
    details = err.details if isinstance(err, OpError) else {}
    public = {k: v for k, v in details.items() if k in PUBLIC_DETAILS}
    return {"ok": False, "error": {"code": err.code.value, "message": err.message, **public}}


def internal_error() -> OpError:
    """What a client sees of a failure the server did not mean (logged where it happened)."""
    return OpError(ErrorCode.INTERNAL, "internal error")


def error_response(
    err: RelaydeskError, headers: Mapping[str, str] | None = None, **extra: Any
) -> JSONResponse:
    """The JSON answer to ``err`` (never cached); ``extra`` adds route-specific body keys."""
    return JSONResponse(
        {**error_body(err), **extra},
        status_code=status_of(err),
        headers={**NO_STORE, **(headers or {})},
    )


async def error_handler(_request: Request, exc: Exception) -> Response:
    """Starlette exception handler for every ``RelaydeskError`` a route lets through."""
    if not isinstance(exc, RelaydeskError):
        raise exc
    return error_response(exc)
