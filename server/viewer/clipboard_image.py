"""``/vnc/{sid}/{token}/clipboard-image``: a PNG image on the desktop's clipboard, both ways,
for the viewer page (docs/files.md, "Clipboard").

RFB carries only text between the viewer and x11vnc, so images take this route: ``GET``
answers the desktop's CLIPBOARD as ``image/png`` (``204`` when it holds no image), ``PUT``
with an ``image/png`` body makes the desktop's CLIPBOARD hold that image (set as the
desktop's user with ``xclip -t image/png``, the relay's ``desktop.clipboard`` ops ``get_png``
and ``set_png``). Protected like ``clipboard``: the capability first, then the holder's role
and the relay's visibility, and only a person's capability. Never cached.

Setting the clipboard is not input into an app: the person's Ctrl+V that pastes the image is,
and it reaches the desktop over the viewer stream (a takeover, docs/control.md).
"""

from __future__ import annotations

import base64
import binascii

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from server.auth.capability import ViewerDenied, ViewerGrant
from server.boundary.body import read_capped
from server.db.store import Store
from server.errors import error_response
from server.relays.calls import call
from server.relays.router import RelayRouter
from server.viewer.access import ViewerRefused
from server.viewer.keyboard_state import HEADERS, answer, relay_refusal, viewer_grant
from wire import ops
from wire.desktop_tool_args import CLIPBOARD_PNG_MAX, PNG_SIGNATURE
from wire.errors import (
    ErrorCode,
    InvalidArgs,
    OpError,
    RelaydeskError,
    UnsupportedMediaType,
)
from wire.ids import RelayId

PNG = "image/png"
# Reading a large image from the clipboard's owner, and setting one, take longer than text.
RELAY_TIMEOUT_S = 15.0


def _refused(err: RelaydeskError) -> Response:
    return error_response(err, HEADERS)


async def _relay(
    relays: RelayRouter, grant: ViewerGrant, args: ops.DesktopClipboardArgs
) -> ops.DesktopClipboardResult:
    try:
        return await call(
            relays, RelayId(grant.relay_id), ops.DESKTOP_CLIPBOARD, args, RELAY_TIMEOUT_S
        )
    except OpError as err:
        if err.code is ErrorCode.PROTOCOL_ERROR:
            raise OpError(err.code, "malformed clipboard answer", status=502) from err
        if err.code in (ErrorCode.FILE_TOO_LARGE, ErrorCode.INVALID_ARGS):
            raise  # 413, 400: the image
        raise relay_refusal(err) from err


async def _png_body(request: Request) -> bytes:
    """The request's PNG image; 415 for another type, 413 over the limit, 400 not a PNG."""
    media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media_type != PNG:
        raise UnsupportedMediaType()
    data = await read_capped(request, CLIPBOARD_PNG_MAX)
    if not data.startswith(PNG_SIGNATURE):
        raise InvalidArgs("body", "not a PNG image")
    return data


def clipboard_image_route(store: Store, relays: RelayRouter, secret_key: str) -> Route:
    async def clipboard_image(request: Request) -> Response:
        """The desktop's clipboard image (``GET``), or set it (``PUT``)."""
        try:
            grant = await viewer_grant(store, secret_key, request, person_only=True)
            sid = request.path_params["sid"]
            if request.method == "PUT":
                encoded = base64.b64encode(await _png_body(request)).decode("ascii")
                args = ops.DesktopClipboardArgs(
                    desktop_session_id=sid, op="set_png", png_b64=encoded
                )
                await _relay(relays, grant, args)
                return answer(200, {"ok": True, "set": True})
            result = await _relay(
                relays, grant, ops.DesktopClipboardArgs(desktop_session_id=sid, op="get_png")
            )
        except (ViewerDenied, ViewerRefused, OpError) as err:
            return _refused(err)
        held = result.get("png_b64")
        if not isinstance(held, str):
            return Response(status_code=204, headers=HEADERS)
        try:
            png = base64.b64decode(held, validate=True)
        except (binascii.Error, ValueError):
            return _refused(
                OpError(ErrorCode.PROTOCOL_ERROR, "malformed clipboard image", status=502)
            )
        return Response(png, media_type=PNG, headers=HEADERS)

    return Route(
        "/vnc/{sid}/{token}/clipboard-image",
        clipboard_image,
        methods=["GET", "PUT"],
        name="clipboard-image",
    )
