"""HTTP statuses of action errors and the ``{ok: false, error: {code, message}}`` body.

Errors are ``wire.errors.OpError`` (one exception root); ``ActionError`` and the input
boundary's ``RequestRejected`` carry an explicit HTTP status where the code alone does not
decide it (413, 415).
"""

from __future__ import annotations

from typing import Any, Final

from wire.errors import ErrorCode, OpError, RequestRejected

STATUS: Final[dict[ErrorCode, int]] = {
    ErrorCode.INVALID_ARGS: 400,
    ErrorCode.UNAUTHORIZED: 401,
    ErrorCode.FORBIDDEN: 403,
    ErrorCode.NOT_FOUND: 404,
    ErrorCode.UNKNOWN_OP: 404,
    ErrorCode.RELAY_NOT_FOUND: 404,
    ErrorCode.SESSION_CONFLICT: 409,
    ErrorCode.NOT_RUNNING: 409,
    ErrorCode.BUSY: 409,
    ErrorCode.LIMIT_REACHED: 409,
    ErrorCode.STALE_SCREEN: 409,
    ErrorCode.INTERNAL: 500,
    ErrorCode.START_FAILED: 502,
    ErrorCode.RELAY_UNREACHABLE: 502,
    ErrorCode.UNAVAILABLE: 503,
    ErrorCode.RELAY_TIMEOUT: 504,
    ErrorCode.TIMEOUT: 504,
    ErrorCode.CANCELLED: 504,
}
# Detail keys that may reach a client; anything else a relay adds stays on the server.
PUBLIC_DETAILS: Final = frozenset(
    {
        "field",
        "current_session_id",
        "actions",
        "max_desktops",
        "limit",
        "desktop_session_id",
        # the stale-screen guard's figures and where to look next
        "difference",
        "threshold",
        "hint",
        "screen_revision",
        "latest_screen_revision",
        "reason",
    }
)


class ActionError(OpError):
    """An ``OpError`` with an explicit HTTP status."""

    def __init__(
        self,
        code: ErrorCode,
        message: str,
        *,
        status: int,
        details: dict[str, Any] | None = None,
    ) -> None:
        self.status = status
        super().__init__(code, message, details)


def status_of(err: OpError) -> int:
    if isinstance(err, ActionError | RequestRejected):
        return err.status
    return STATUS.get(err.code, 500)


def error_body(err: OpError) -> dict[str, Any]:
    """``{ok: false, error: {code, message, …public details}}``."""
    details = {k: v for k, v in err.details.items() if k in PUBLIC_DETAILS}
    return {"ok": False, "error": {"code": err.code.value, "message": err.message, **details}}


def relay_error(err: OpError) -> OpError:
    """A relay's answer as the client should see it: a timeout is ``relay_timeout``."""
    if err.code in (ErrorCode.TIMEOUT, ErrorCode.CANCELLED):
        return OpError(ErrorCode.RELAY_TIMEOUT, "the relay did not answer in time")
    return err
