"""The screen tool on the server: revisions, the stale-screen guard, the relay call, audit.

Flow (DESIGN §7, ``docs/screen-tool.md``): a screenshot's raw capture is kept under a signed
``screen_revision``; a guarded action (click, double_click, drag) must name the revision its
point was chosen on, the server checks the revision belongs to this relay and desktop, cuts the
reference crop around the point (or ``target_bbox``) from the kept capture and sends it with
the action; the relay compares it with the screen immediately before any input.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, Protocol, cast

from server.db.audit import AuditWriter
from server.relays.calls import call
from server.screen.request import ScreenRequest, audit_shape, parse
from server.screen.revisions import Binding, Capture, KeptCapture, RevisionStore
from wire import ops
from wire.errors import ErrorCode, InvalidArgs, OpError
from wire.guard import crop_rect, encode_crop
from wire.ids import RelayId
from wire.screen_actions import SCREEN_ACTIONS

log = logging.getLogger(__name__)

STALE_HINT = "the screen changed around the target: take a new screenshot and choose again"
# Results of the relay that stay on the server (host details, the raw capture).
_PRIVATE_RESULT_KEYS = ("capture", "display")


class RelayRequester(Protocol):
    """The ``RelayHub`` method the tool uses."""

    def request(
        self, relay_id: RelayId, op: str, args: dict[str, Any] | None = ..., timeout_s: float = ...
    ) -> Awaitable[Any]: ...


@dataclass(frozen=True)
class Caller:
    """Who asks, in which conversation, for which relay (resolved by the actions registry)."""

    actor: str
    conversation_id: str
    relay_id: str | None
    source: str = "api"

    @property
    def relay(self) -> RelayId:
        if self.relay_id is None:
            raise OpError(ErrorCode.INTERNAL, "no relay resolved")
        return RelayId(self.relay_id)


class ScreenTool:
    """Runs ``screen`` actions for callers already authorised on the relay."""

    def __init__(self, relays: RelayRequester, revisions: RevisionStore, audit: AuditWriter):
        self.relays = relays
        self.revisions = revisions
        self.audit = audit

    async def run(self, caller: Caller, body: Any) -> dict[str, Any]:
        """Check, run and audit one action; raises ``OpError`` (audited too)."""
        request: ScreenRequest | None = None
        session: str | None = None
        try:
            request = parse(body)
            session = request.desktop_session_id
            result = await self._run(caller, request)
            session = result.get("desktop_session_id", session)
        except OpError as err:
            await self._audit(caller, request, body, session, err)
            raise
        await self._audit(caller, request, body, session, None, result)
        return result

    async def refused(self, caller: Caller, body: Any, error: OpError) -> None:
        """Audit a call refused before it reached the tool (e.g. an invisible relay)."""
        try:
            request: ScreenRequest | None = parse(body)
        except OpError:
            request = None
        await self._audit(caller, request, body, None, error)

    async def _run(self, caller: Caller, request: ScreenRequest) -> dict[str, Any]:
        if request.action == "screenshot":
            return await self._screenshot(caller, request)
        args = dict(request.relay_args)
        if request.desktop_session_id is not None:
            args["desktop_session_id"] = request.desktop_session_id
        kept = None
        if request.guarded:
            kept = self._kept(caller, request)
            args.update(await _guard_args(request, kept))
        try:
            result = await self._relay(caller, request, args)
        except OpError as err:
            if err.code is ErrorCode.STALE_SCREEN and kept is not None:
                raise self._stale(err, request, kept) from None
            raise
        return _public(result)

    async def _relay(
        self, caller: Caller, request: ScreenRequest, args: dict[str, Any]
    ) -> dict[str, Any]:
        if request.local and request.desktop_session_id is None:
            # The relay's local desktop (its host's real screen), by kind: the same op as for
            # any other desktop; the relay's host helper runs it on the host display.
            args["kind"] = "local"
        spec = ops.SCREEN[request.action]
        result = await call(self.relays, caller.relay, spec, cast(ops.ScreenArgs, args),
                            request.timeout_s)  # fmt: skip
        return dict(result)

    async def _screenshot(self, caller: Caller, request: ScreenRequest) -> dict[str, Any]:
        args = dict(request.relay_args)
        if request.desktop_session_id is not None:
            args["desktop_session_id"] = request.desktop_session_id
        try:
            result = await self._relay(caller, request, args)
        except OpError as err:
            if err.code is ErrorCode.LIMIT_REACHED:
                message = (
                    f"{err.message}: this screenshot is too large to carry; a smaller desktop "
                    "geometry, or a larger RELAYDESK_MAX_TEXT_FRAME on the server, fits it"
                )
                raise OpError(err.code, message, err.details) from None
            raise
        # A PNG screenshot is its own capture; other formats come with the capture's PNG.
        image = result.get("image") if result.get("format") == "png" else None
        capture = Capture.from_wire(result.get("capture"), image)
        binding = Binding(
            caller.relay, str(result.get("desktop_session_id")), str(result.get("display"))
        )
        if (capture.width, capture.height) != (result.get("width"), result.get("height")):
            raise OpError(ErrorCode.PROTOCOL_ERROR, "the relay's capture and image differ in size")
        public = _public(result)
        public["screen_revision"] = self.revisions.keep(binding, capture)
        return public

    def _kept(self, caller: Caller, request: ScreenRequest) -> KeptCapture:
        if request.revision is None:
            raise OpError(
                ErrorCode.MISSING_SCREEN_REVISION,
                f"{request.action} needs expected_screen_revision: the screen_revision of the "
                "screenshot the point was chosen on",
            )
        return self.revisions.lookup(request.revision, caller.relay, request.desktop_session_id)

    def _stale(self, err: OpError, request: ScreenRequest, kept: KeptCapture) -> OpError:
        latest = self.revisions.latest(kept.revision.binding)
        details = {
            **{k: v for k, v in err.details.items() if k in ("difference", "threshold", "rect")},
            "screen_revision": request.revision,
            "latest_screen_revision": latest if latest != request.revision else None,
            "hint": STALE_HINT,
        }
        figures = ""
        if isinstance(details.get("difference"), float | int):
            figures = f" (difference {details['difference']} > threshold {details['threshold']})"
        message = (
            f"the screen changed around the target since the screenshot{figures}; "
            "take a new screenshot and choose again"
        )
        return OpError(ErrorCode.STALE_SCREEN, message, details)

    async def _audit(
        self,
        caller: Caller,
        request: ScreenRequest | None,
        body: Any,
        session: str | None,
        error: OpError | None,
        result: dict[str, Any] | None = None,
    ) -> None:
        details = _audit_details(request, body, error, result)
        try:
            await self.audit.write_audit(
                op=f"screen.{request.action if request is not None else 'invalid'}",
                actor=caller.actor,
                outcome="ok" if error is None else "refused",
                conversation_id=caller.conversation_id,
                relay_id=caller.relay_id,
                desktop_session_id=session,
                reason=None if error is None else error.code.value,
                source=caller.source,
                details=details,
            )
        except Exception:
            log.exception("writing the screen audit row failed")


async def _guard_args(request: ScreenRequest, kept: KeptCapture) -> dict[str, Any]:
    """``guard`` and ``revision_target`` for a guarded action, from the kept capture."""
    capture = kept.capture
    assert request.point is not None
    _on_screenshot(request.point, capture, "x", "y")
    if request.end is not None:
        _on_screenshot(request.end, capture, "to.x", "to.y")
    rect = crop_rect(request.point, (capture.width, capture.height), request.target_bbox)
    crop = await asyncio.to_thread(capture.region, rect)
    binding = kept.revision.binding
    return {
        "guard": {"crop": encode_crop(crop), "rect": rect.to_dict()},
        "revision_target": {
            "desktop_session_id": binding.desktop_session_id,
            "display": binding.display,
        },
    }


def _on_screenshot(point: tuple[int, int], capture: Capture, x_name: str, y_name: str) -> None:
    """Coordinates are pixels of the full-resolution screenshot: never clamped."""
    for name, value, limit in ((x_name, point[0], capture.width),
                               (y_name, point[1], capture.height)):  # fmt: skip
        if not 0 <= value < limit:
            raise InvalidArgs(
                name,
                f"{value} is outside the {capture.width}x{capture.height} screenshot "
                f"(0..{limit - 1}); coordinates are full-resolution pixels",
            )


def _public(result: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in result.items() if k not in _PRIVATE_RESULT_KEYS}


def _audit_details(
    request: ScreenRequest | None,
    body: Any,
    error: OpError | None,
    result: dict[str, Any] | None,
) -> dict[str, Any]:
    if request is not None:
        details = audit_shape(request)
    else:
        action = body.get("action") if isinstance(body, dict) else None
        details = {"action": action if action in SCREEN_ACTIONS else None}
    if error is not None:
        details["error"] = error.code.value
        if "difference" in error.details:
            details["difference"] = error.details["difference"]
    if result is not None and "width" in result:
        details["width"], details["height"] = result["width"], result["height"]
    if result is not None and isinstance(result.get("guard"), dict):
        details["difference"] = result["guard"].get("difference")
    return details
