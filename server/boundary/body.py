"""One reader for every request body: size cap while streaming, JSON type, checked content.

``read_json_object(request, limit)`` is the only way a route reads a body. It refuses, in this
order and before any handler logic sees a byte:

1. a declared ``Content-Length`` over ``limit`` → ``BodyTooLarge`` (413), nothing read;
2. a ``Content-Type`` other than ``application/json`` → ``UnsupportedMediaType`` (415);
3. a stream that passes ``limit`` while it is read → 413 (the rest is never read);
4. invalid UTF-8, invalid JSON, deep nesting, lone surrogates or NUL, absurd numbers, or not an
   object → ``InvalidInput`` (400) naming the field (``wire.jsonbody``).

A refusal is answered by ``server.errors.error_response`` like every other error.
"""

from __future__ import annotations

from typing import Any, Final

from starlette.exceptions import HTTPException
from starlette.requests import HTTPConnection, Request
from starlette.responses import PlainTextResponse, Response

from server.errors import error_response
from wire.errors import BodyTooLarge, ErrorCode, OpError, UnsupportedMediaType
from wire.jsonbody import check_text, is_json_media_type, parse_json_object

# Ids, cursors and names in paths, query strings and headers are short; anything longer is a
# mistake or an attack and never reaches the store.
MAX_PARAM_CHARS: Final = 256


def declared_length(request: HTTPConnection) -> int | None:
    """The ``Content-Length`` header as a number (None when absent or not a number)."""
    raw = request.headers.get("content-length", "").strip()
    if not (raw.isascii() and raw.isdigit()):
        return None
    return int(raw) if len(raw) <= 18 else 10**18


async def read_capped(request: Request, limit: int) -> bytes:
    """The body, read chunk by chunk; ``BodyTooLarge`` as soon as it passes ``limit``."""
    declared = declared_length(request)
    if declared is not None and declared > limit:
        raise BodyTooLarge(limit)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(limit)
        chunks.append(chunk)
    return b"".join(chunks)


async def read_json_object(
    request: Request, limit: int, *, empty_ok: bool = False
) -> dict[str, Any]:
    """The body as a checked JSON object; ``RequestRejected`` otherwise (see the module doc).

    With ``empty_ok`` an empty body (no ``Content-Type`` needed) reads as ``{}``.
    """
    declared = declared_length(request)
    if declared is not None and declared > limit:
        raise BodyTooLarge(limit)
    content_type = request.headers.get("content-type")
    if content_type is not None and not is_json_media_type(content_type):
        raise UnsupportedMediaType()
    if content_type is None and not (empty_ok and declared in (None, 0)):
        raise UnsupportedMediaType()
    raw = await read_capped(request, limit)
    if content_type is None and raw:
        raise UnsupportedMediaType()
    return parse_json_object(raw, empty_ok=empty_ok)


def text_param(field: str, value: str, max_chars: int = MAX_PARAM_CHARS) -> str:
    """A path, query or header value that may reach the store; ``InvalidInput`` otherwise."""
    return check_text(field, value, max_chars)


def path_param(request: HTTPConnection, name: str, max_chars: int = MAX_PARAM_CHARS) -> str:
    """``request.path_params[name]``, checked by ``text_param``."""
    return text_param(name, str(request.path_params[name]), max_chars)


ROUTING_CODES: Final = {404: ErrorCode.NOT_FOUND, 405: ErrorCode.METHOD_NOT_ALLOWED}


async def routing_error(request: Request, exc: Exception) -> Response:
    """The router's 404/405: JSON under ``/api/`` (every API answer is JSON), text elsewhere."""
    assert isinstance(exc, HTTPException)
    headers = dict(exc.headers or {})
    if not request.url.path.startswith("/api/"):
        return PlainTextResponse(exc.detail, status_code=exc.status_code, headers=headers)
    code = ROUTING_CODES.get(exc.status_code, ErrorCode.INVALID_ARGS)
    refused = OpError(code, exc.detail.lower(), status=exc.status_code)
    return error_response(refused, headers)
