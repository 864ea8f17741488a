"""Error and close codes, defined once, and the relaydesk exception tree.

Every code has one HTTP status (:data:`HTTP_STATUS`); an exception whose status the code alone
does not decide (a body over its limit is 413, too many logins 429) carries its own ``status``.
Packages define their own subclasses (``server.auth.errors``, ``server.viewer.access``,
``server.db.errors``, ``relay.config``, ``relay.desktops.probe``) under this root. (The
Python client, a distribution of its own, has its own ``ApiError``.)

Tree::

    RelaydeskError            every error relaydesk raises on purpose (``code``, ``message``)
    ├── ProtocolError         the peer broke wire protocol v1 (carries a CloseCode)
    │   └── FrameTooLarge     a frame above the negotiated limit
    ├── RfbHandshakeError     a VNC peer broke or refused the RFB security handshake
    ├── ChannelClosedError    a channel (or the byte stream behind it) ended (ChannelCloseCode)
    └── OpError               an operation failed; travels as a ``res`` error
        ├── InvalidArgs       arguments do not fit the op's contract
        ├── RequestRejected   refused at the HTTP input boundary (carries its HTTP ``status``)
        │   ├── InvalidInput          malformed body or parameter (400, names the field)
        │   ├── BodyTooLarge          body over the route's limit (413)
        │   └── UnsupportedMediaType  a body that is not ``application/json`` (415)
        ├── SessionConflict   another desktop session now holds the slot
        └── RequestTimeout    the peer did not answer in time
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import IntEnum, StrEnum
from types import MappingProxyType
from typing import Any, Final


class ErrorCode(StrEnum):
    """Codes carried in ``res`` errors and HTTP error bodies."""

    INVALID_ARGS = "invalid_args"
    UNKNOWN_OP = "unknown_op"
    DUPLICATE_REQUEST = "duplicate_request"
    UNKNOWN_CHANNEL = "unknown_channel"
    PROTOCOL_ERROR = "protocol_error"
    INTERNAL = "internal"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"
    BUSY = "busy"
    NOT_FOUND = "not_found"
    UNAUTHORIZED = "unauthorized"
    TOKEN_EXPIRED = "token_expired"  # noqa: S105 - an error code
    FORBIDDEN = "forbidden"
    SESSION_CONFLICT = "session_conflict"
    NOT_RUNNING = "not_running"
    # pause and resume (docs/desktops.md, "Pause and resume")
    PAUSED = "paused"
    NOT_PAUSED = "not_paused"
    # a reset replaced the desktop in its slot (docs/desktops.md, "Reset")
    DESKTOP_CHANGED = "desktop_changed"
    LIMIT_REACHED = "limit_reached"
    UNAVAILABLE = "unavailable"
    START_FAILED = "start_failed"
    RELAY_UNREACHABLE = "relay_unreachable"
    RELAY_TIMEOUT = "relay_timeout"
    RELAY_NOT_FOUND = "relay_not_found"
    STALE_SCREEN = "stale_screen"
    MISSING_SCREEN_REVISION = "missing_screen_revision"
    REVISION_MISMATCH = "revision_mismatch"
    REVISION_EXPIRED = "revision_expired"
    UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    TAKEOVER_ACTIVE = "takeover_active"
    STOPPED_BY_USER = "stopped_by_user"
    # a model's safety checks wait for a person's decision (docs/computer-use.md)
    APPROVAL_REQUIRED = "approval_required"
    # accessibility tools (docs/accessibility.md)
    A11Y_UNAVAILABLE = "a11y_unavailable"
    STALE_REF = "stale_ref"
    SNAPSHOT_NOT_FOUND = "snapshot_not_found"
    ELEMENT_NOT_FOUND = "element_not_found"
    APP_NOT_FOUND = "app_not_found"
    POLICY_DENIED = "policy_denied"
    ACTION_FAILED = "action_failed"
    # files in a desktop's home (docs/files.md)
    PATH_OUTSIDE_HOME = "path_outside_home"
    FILE_TOO_LARGE = "file_too_large"
    OFFSET_MISMATCH = "offset_mismatch"


class CloseCode(IntEnum):
    """WebSocket close codes used on relay and viewer connections."""

    NORMAL = 1000
    GOING_AWAY = 1001
    PROTOCOL_ERROR = 1002
    UNSUPPORTED_DATA = 1003
    INVALID_DATA = 1007  # a message that is not what the protocol carries (CDP: not JSON)
    POLICY_VIOLATION = 1008
    MESSAGE_TOO_BIG = 1009
    INTERNAL_ERROR = 1011
    UNAUTHORIZED = 4001
    UNSUPPORTED_PROTOCOL = 4002
    HELLO_EXPECTED = 4003
    HEARTBEAT_TIMEOUT = 4008
    REPLACED = 4009
    RELAY_REVOKED = 4010
    # viewer streams
    UNKNOWN_SESSION = 4404
    VIEWER_EXPIRED = 4401
    VIEWER_FORBIDDEN = 4403
    RELAY_UNREACHABLE = 4502
    DESKTOP_STOPPED = 4410
    DESKTOP_PAUSED = 4423  # the page waits for the desktop to be resumed
    STOPPED_BY_USER = 4430  # a person's Stop ended an agent's connection (the CDP endpoint)
    AUDIO_UNAVAILABLE = 4415  # the desktop has no sound (never had, or its sound server died)


# The HTTP status of each code, wherever an error becomes an HTTP answer (server, host helper).
HTTP_STATUS: Final[Mapping[ErrorCode, int]] = MappingProxyType(
    {
        ErrorCode.INVALID_ARGS: 400,
        ErrorCode.PROTOCOL_ERROR: 400,
        ErrorCode.MISSING_SCREEN_REVISION: 400,
        ErrorCode.UNAUTHORIZED: 401,
        ErrorCode.TOKEN_EXPIRED: 401,
        ErrorCode.FORBIDDEN: 403,
        ErrorCode.NOT_FOUND: 404,
        ErrorCode.UNKNOWN_OP: 404,
        ErrorCode.UNKNOWN_CHANNEL: 404,
        ErrorCode.RELAY_NOT_FOUND: 404,
        ErrorCode.METHOD_NOT_ALLOWED: 405,
        ErrorCode.DUPLICATE_REQUEST: 409,
        ErrorCode.SESSION_CONFLICT: 409,
        ErrorCode.NOT_RUNNING: 409,
        ErrorCode.PAUSED: 409,
        ErrorCode.NOT_PAUSED: 409,
        ErrorCode.DESKTOP_CHANGED: 409,
        ErrorCode.BUSY: 409,
        ErrorCode.LIMIT_REACHED: 409,
        ErrorCode.STALE_SCREEN: 409,
        ErrorCode.REVISION_MISMATCH: 409,
        ErrorCode.REVISION_EXPIRED: 409,
        ErrorCode.STALE_REF: 409,
        ErrorCode.SNAPSHOT_NOT_FOUND: 404,
        ErrorCode.ELEMENT_NOT_FOUND: 404,
        ErrorCode.APP_NOT_FOUND: 404,
        ErrorCode.POLICY_DENIED: 403,
        ErrorCode.ACTION_FAILED: 422,
        ErrorCode.PATH_OUTSIDE_HOME: 403,
        ErrorCode.FILE_TOO_LARGE: 413,
        ErrorCode.OFFSET_MISMATCH: 409,
        ErrorCode.A11Y_UNAVAILABLE: 503,
        ErrorCode.UNSUPPORTED_MEDIA_TYPE: 415,
        # A person holds the desktop (423 Locked); a person stopped this agent (409).
        ErrorCode.TAKEOVER_ACTIVE: 423,
        ErrorCode.STOPPED_BY_USER: 409,
        ErrorCode.APPROVAL_REQUIRED: 403,
        ErrorCode.INTERNAL: 500,
        ErrorCode.START_FAILED: 502,
        ErrorCode.RELAY_UNREACHABLE: 502,
        ErrorCode.UNAVAILABLE: 503,
        ErrorCode.RELAY_TIMEOUT: 504,
        ErrorCode.TIMEOUT: 504,
        ErrorCode.CANCELLED: 504,
    }
)


class RelaydeskError(Exception):
    """Root of every error relaydesk raises on purpose.

    ``status`` is set only where the HTTP status is not the code's (:func:`http_status`).
    """

    code: ErrorCode = ErrorCode.INTERNAL
    status: int | None = None

    def __init__(self, message: str | None = None) -> None:
        self.message = message or self.default_message()
        super().__init__(self.message)

    def default_message(self) -> str:
        return self.code.value.replace("_", " ")


def http_status(err: RelaydeskError) -> int:
    """The HTTP status ``err`` answers with: its own, else its code's."""
    return err.status if err.status is not None else HTTP_STATUS.get(err.code, 500)


class ProtocolError(RelaydeskError):
    """The peer broke the wire protocol; the connection closes with ``close_code``."""

    code = ErrorCode.PROTOCOL_ERROR

    def __init__(self, message: str, close_code: CloseCode = CloseCode.PROTOCOL_ERROR) -> None:
        self.close_code = close_code
        super().__init__(message)


class FrameTooLarge(ProtocolError):
    """A frame exceeded the configured limit."""

    def __init__(self, size: int, limit: int) -> None:
        self.size = size
        self.limit = limit
        super().__init__(f"frame of {size} bytes exceeds limit {limit}", CloseCode.MESSAGE_TOO_BIG)


class RfbHandshakeError(RelaydeskError):
    """A VNC server or viewer broke or refused the RFB security handshake (``wire.rfb``)."""

    code = ErrorCode.PROTOCOL_ERROR

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"RFB handshake: {reason}")


class ChannelClosedError(RelaydeskError):
    """A channel, or the byte stream behind it, ended; ``close_code`` and ``reason`` say why."""

    code = ErrorCode.UNAVAILABLE

    def __init__(self, close_code: ChannelCloseCode, reason: str) -> None:
        self.close_code = close_code
        self.reason = reason
        super().__init__(f"channel closed ({close_code.name}): {reason}")


class OpError(RelaydeskError):
    """An operation failed; serialised as ``{code, message, details}``.

    ``status`` overrides the code's HTTP status where a route needs another (e.g. 413).
    """

    def __init__(
        self,
        code: ErrorCode,
        message: str | None = None,
        details: dict[str, Any] | None = None,
        *,
        status: int | None = None,
    ) -> None:
        self.code = code
        self.details = details or {}
        if status is not None:
            self.status = status
        super().__init__(message)

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code.value, "message": self.message, "details": self.details}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> OpError:
        try:
            code = ErrorCode(str(data.get("code")))
        except ValueError:
            code = ErrorCode.INTERNAL
        details = data.get("details")
        extra = details if isinstance(details, dict) else {}
        return cls(code, str(data.get("message") or ""), extra)


class InvalidArgs(OpError):
    """Arguments that do not fit the op's contract (names the field)."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(ErrorCode.INVALID_ARGS, f"{field}: {problem}", {"field": field})


class RequestRejected(OpError):
    """A request refused at the input boundary, before any handler ran."""

    status: int = 400


class InvalidInput(RequestRejected):
    """A body or parameter that is malformed (not JSON, too deep, invalid text, absurd number)."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(ErrorCode.INVALID_ARGS, f"{field}: {problem}", {"field": field})


class BodyTooLarge(RequestRejected):
    """A body larger than the route accepts; nothing past ``limit`` bytes was read."""

    status = 413

    def __init__(self, limit: int) -> None:
        self.limit = limit
        super().__init__(
            ErrorCode.LIMIT_REACHED, f"request body exceeds {limit} bytes", {"limit": limit}
        )


class UnsupportedMediaType(RequestRejected):
    """A body sent with a ``Content-Type`` other than JSON."""

    status = 415

    def __init__(self) -> None:
        super().__init__(
            ErrorCode.UNSUPPORTED_MEDIA_TYPE,
            "request body must be JSON (Content-Type: application/json)",
            {"field": "Content-Type"},
        )


class SessionConflict(OpError):
    """Another desktop session holds the slot the caller named."""

    def __init__(self, current_session_id: str) -> None:
        self.current_session_id = current_session_id
        super().__init__(
            ErrorCode.SESSION_CONFLICT,
            "another desktop session now holds this slot",
            {"current_session_id": current_session_id},
        )


class RequestTimeout(OpError):
    """The peer did not answer within the request's timeout."""

    def __init__(self, op: str, timeout_ms: int) -> None:
        super().__init__(ErrorCode.TIMEOUT, f"{op} did not answer within {timeout_ms} ms")


class ChannelCloseCode(IntEnum):
    """Codes carried in a channel ``CLOSE`` frame."""

    NORMAL = 0
    ERROR = 1
    UNKNOWN_CHANNEL = 2
    CREDIT_EXCEEDED = 3
    TARGET_UNAVAILABLE = 4
    TARGET_CLOSED = 5
    DESKTOP_STOPPED = 6
    RELAY_GONE = 7
    VIEWER_GONE = 8
