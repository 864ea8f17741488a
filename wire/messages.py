"""Text messages of wire protocol v1: typed dataclasses, parsing and encoding.

Parsing is table-driven: each ``type`` has one small parser that validates its fields and
raises :class:`~wire.errors.ProtocolError` on anything malformed.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from wire import jsontext
from wire.errors import CloseCode, FrameTooLarge, ProtocolError
from wire.frames import DEFAULT_MAX_PAYLOAD
from wire.ids import RelayId, RequestId

PROTOCOL_VERSION: Final = 1
SUBPROTOCOL: Final = "relaydesk.v1"
DEFAULT_MAX_TEXT: Final = 16 * 1024 * 1024
DEFAULT_TIMEOUT_MS: Final = 30_000
MAX_TIMEOUT_MS: Final = 3_600_000
MAX_ID_LENGTH: Final = 64
# What a ``hello`` may announce: far above any real relay, far below what floods a server.
MAX_HELLO_DESKTOPS: Final = 1024
MAX_CAPABILITIES: Final = 64
MAX_NAME_LENGTH: Final = 64  # a capability, the relay's version


@dataclass(frozen=True)
class Hello:
    """First frame a relay sends: what it is and what it runs now."""

    protocol: int
    relay_version: str
    capabilities: tuple[str, ...] = ()
    desktops: tuple[dict[str, Any], ...] = ()
    # The largest binary frame payload and text frame the relay reads (docs/protocol.md: each
    # has one default when left out).
    max_frame: int = DEFAULT_MAX_PAYLOAD
    max_text: int = DEFAULT_MAX_TEXT


@dataclass(frozen=True)
class Welcome:
    """The server's answer to an accepted ``hello``."""

    relay_id: RelayId
    heartbeat_s: float
    max_frame: int
    # The largest text frame the server reads.
    max_text: int


@dataclass(frozen=True)
class Request:
    """An operation asked of the peer."""

    id: RequestId
    op: str
    args: dict[str, Any] = field(default_factory=dict)
    timeout_ms: int = DEFAULT_TIMEOUT_MS


@dataclass(frozen=True)
class Response:
    """The answer to one request: a result or an error ``{code, message, details}``."""

    id: RequestId
    ok: bool
    result: Any = None
    error: dict[str, Any] | None = None


@dataclass(frozen=True)
class Cancel:
    """The sender no longer wants the answer to request ``id``."""

    id: RequestId


@dataclass(frozen=True)
class Event:
    """A one-way notification, relay → server (e.g. ``desktop.changed``)."""

    name: str
    data: dict[str, Any] = field(default_factory=dict)


Message = Hello | Welcome | Request | Response | Cancel | Event


def _require(obj: dict[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    value = obj.get(key)
    if isinstance(value, bool) and kind in (int, float, (int, float)):
        raise ProtocolError(f"field {key!r} must be a number")
    if not isinstance(value, kind):
        raise ProtocolError(f"field {key!r} is missing or has the wrong type")
    return value


def _request_id(obj: dict[str, Any]) -> RequestId:
    value = _require(obj, "id", str)
    if not value or len(value) > MAX_ID_LENGTH:
        raise ProtocolError("field 'id' must be 1-64 characters")
    return RequestId(value)


def _name(value: object) -> bool:
    return isinstance(value, str) and len(value) <= MAX_NAME_LENGTH


def _parse_hello(obj: dict[str, Any]) -> Hello:
    caps = obj.get("capabilities", [])
    desktops = obj.get("desktops", [])
    if not isinstance(caps, list) or len(caps) > MAX_CAPABILITIES or not all(map(_name, caps)):
        raise ProtocolError(
            f"field 'capabilities' must be a list of at most {MAX_CAPABILITIES} strings of "
            f"at most {MAX_NAME_LENGTH} characters"
        )
    if isinstance(desktops, list) and len(desktops) > MAX_HELLO_DESKTOPS:
        raise ProtocolError(f"field 'desktops' has more than {MAX_HELLO_DESKTOPS} rows")
    if not isinstance(desktops, list) or not all(isinstance(d, dict) for d in desktops):
        raise ProtocolError("field 'desktops' must be a list of objects")
    relay_version = _require(obj, "relay_version", str)
    if len(relay_version) > MAX_NAME_LENGTH:
        raise ProtocolError(f"field 'relay_version' is longer than {MAX_NAME_LENGTH} characters")
    return Hello(
        protocol=_require(obj, "protocol", int),
        relay_version=relay_version,
        capabilities=tuple(caps),
        desktops=tuple(desktops),
        max_frame=_optional_positive(obj, "max_frame", DEFAULT_MAX_PAYLOAD),
        max_text=_optional_positive(obj, "max_text", DEFAULT_MAX_TEXT),
    )


def _positive(obj: dict[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    value = _require(obj, key, kind)
    try:
        number = float(value)
    except OverflowError as err:
        raise ProtocolError(f"field {key!r} is out of range") from err
    if not math.isfinite(number) or number <= 0:
        raise ProtocolError(f"field {key!r} must be a positive number")
    return value


def _optional_positive(obj: dict[str, Any], key: str, default: int) -> int:
    """A positive integer field with a documented default when left out."""
    return int(_positive(obj, key, int)) if key in obj else default


def _parse_welcome(obj: dict[str, Any]) -> Welcome:
    return Welcome(
        relay_id=RelayId(_require(obj, "relay_id", str)),
        heartbeat_s=float(_positive(obj, "heartbeat_s", (int, float))),
        max_frame=_positive(obj, "max_frame", int),
        max_text=_positive(obj, "max_text", int),
    )


def _parse_request(obj: dict[str, Any]) -> Request:
    args = obj.get("args", {})
    if not isinstance(args, dict):
        raise ProtocolError("field 'args' must be an object")
    timeout_ms = obj.get("timeout_ms", DEFAULT_TIMEOUT_MS)
    if isinstance(timeout_ms, bool) or not isinstance(timeout_ms, int):
        raise ProtocolError("field 'timeout_ms' must be an integer")
    if not 0 < timeout_ms <= MAX_TIMEOUT_MS:
        raise ProtocolError(f"field 'timeout_ms' must be in 1..{MAX_TIMEOUT_MS}")
    op = _require(obj, "op", str)
    if not op:
        raise ProtocolError("field 'op' must not be empty")
    return Request(id=_request_id(obj), op=op, args=args, timeout_ms=timeout_ms)


def _parse_response(obj: dict[str, Any]) -> Response:
    ok = obj.get("ok")
    if not isinstance(ok, bool):
        raise ProtocolError("field 'ok' must be a boolean")
    error = obj.get("error")
    if not ok and not (isinstance(error, dict) and isinstance(error.get("code"), str)):
        raise ProtocolError("an error response needs 'error': {code, message}")
    return Response(id=_request_id(obj), ok=ok, result=obj.get("result"), error=error)


def _parse_cancel(obj: dict[str, Any]) -> Cancel:
    return Cancel(id=_request_id(obj))


def _parse_event(obj: dict[str, Any]) -> Event:
    data = obj.get("data", {})
    if not isinstance(data, dict):
        raise ProtocolError("field 'data' must be an object")
    return Event(name=_require(obj, "name", str), data=data)


_PARSERS: Final[dict[str, Callable[[dict[str, Any]], Message]]] = {
    "hello": _parse_hello,
    "welcome": _parse_welcome,
    "req": _parse_request,
    "res": _parse_response,
    "cancel": _parse_cancel,
    "event": _parse_event,
}


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:20]} is out of range")
    return value


def parse_message(text: str, max_size: int = DEFAULT_MAX_TEXT) -> Message:
    """Parse one text frame; raise :class:`ProtocolError` on anything malformed."""
    if len(text) > max_size:
        raise FrameTooLarge(len(text), max_size)
    try:
        obj = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except (ValueError, RecursionError) as err:
        raise ProtocolError("text frame is not valid JSON", CloseCode.UNSUPPORTED_DATA) from err
    if not isinstance(obj, dict):
        raise ProtocolError("text frame must be a JSON object")
    kind = obj.get("type")
    parser = _PARSERS.get(kind) if isinstance(kind, str) else None
    if parser is None:
        raise ProtocolError(f"unknown message type {str(kind)[:40]!r}")
    return parser(obj)


def to_dict(message: Message) -> dict[str, Any]:
    """The JSON object for ``message``, with its ``type`` tag."""
    match message:
        case Hello():
            return {
                "type": "hello",
                "protocol": message.protocol,
                "relay_version": message.relay_version,
                "capabilities": list(message.capabilities),
                "desktops": list(message.desktops),
                "max_frame": message.max_frame,
                "max_text": message.max_text,
            }
        case Welcome():
            return {
                "type": "welcome",
                "relay_id": message.relay_id,
                "heartbeat_s": message.heartbeat_s,
                "max_frame": message.max_frame,
                "max_text": message.max_text,
            }
        case Request():
            return {
                "type": "req",
                "id": message.id,
                "op": message.op,
                "args": message.args,
                "timeout_ms": message.timeout_ms,
            }
        case Response():
            body: dict[str, Any] = {"type": "res", "id": message.id, "ok": message.ok}
            body.update({"result": message.result} if message.ok else {"error": message.error})
            return body
        case Cancel():
            return {"type": "cancel", "id": message.id}
        case Event():
            return {"type": "event", "name": message.name, "data": message.data}


def encode_message(message: Message) -> str:
    """Serialise ``message`` to a compact JSON text frame."""
    return jsontext.dumps_text(to_dict(message))
