"""The screen tool on the server: revisions, the stale-screen guard, the relay call, audit.

Flow (docs/screen-tool.md, "The server half"): a screenshot's or zoom's raw capture is kept under
a signed ``screen_revision``; a request's coordinates (pixels, normalized or zoom) are converted
to screen pixels once (``ScreenRequest.placed``); a guarded action (click, double_click, drag,
mouse_down) must name the revision its point was chosen on (``mouse_down`` without a point:
the pointer's position, read from the desktop first), the server checks the revision belongs
to this relay and desktop, cuts the reference crop around the point (or ``target_bbox``) from
the kept capture — within a zoom's region for a zoom's revision — and sends it with the
action; the relay compares it with the screen immediately before any input.

With several replicas, a call whose revision another replica issued (and keeps the capture
of) runs on that replica: the whole call goes there (``RevisionIssuers``), which checks,
guards, sends it on to the relay's owner and audits it, as if it had been called there.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, Final, Protocol, cast

from server.db.audit import AuditRow, AuditWriter
from server.instruments import SCREEN_SECONDS
from server.relays.calls import call
from server.screen.request import ScreenRequest, audit_shape, parse
from server.screen.revisions import Binding, Capture, KeptCapture, RevisionStore, View
from wire import ops
from wire.errors import ErrorCode, InvalidArgs, OpError, RelaydeskError
from wire.guard import (
    DIGEST_CAPABILITY,
    DIGEST_DIFFERS,
    CropRect,
    RGBArray,
    crop_digest,
    crop_rect,
    encode_crop,
)
from wire.ids import RelayId
from wire.screen_actions import IMAGE_ACTIONS, SCREEN_ACTIONS, ScreenAction
from wire.screen_coords import Frame, zoom_size

log = logging.getLogger(__name__)

STALE_HINT = "the screen changed around the target: take a new screenshot and choose again"
# Results of the relay that stay on the server (host details, the raw capture).
_PRIVATE_RESULT_KEYS = ("capture", "display")
# Every answer of the screen tool says it came from pixels (not the accessibility tree).
VISION_SOURCE: Final = "vision"


class RelayRequester(Protocol):
    """The ``RelayHub`` methods the tool uses."""

    def request(
        self, relay_id: RelayId, op: str, args: dict[str, Any] | None = ..., timeout_s: float = ...
    ) -> Awaitable[Any]: ...

    def capabilities(self, relay_id: RelayId) -> frozenset[str]: ...


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


class IssuerGone(RelaydeskError):
    """The replica that issued a revision, and kept its capture, is gone or unreachable."""

    code = ErrorCode.REVISION_EXPIRED


class RevisionIssuers(Protocol):
    """The other replicas, for calls on the revisions they issued (``server.cluster.screen``)."""

    @property
    def replica_id(self) -> str:
        """This replica's id, which the revisions it issues carry."""
        ...

    async def run(
        self, issuer: str, caller: Caller, body: dict[str, Any], timeout_s: float
    ) -> dict[str, Any]:
        """The call's answer from replica ``issuer``, or its ``OpError`` (audited there);
        :class:`IssuerGone` when that replica is gone or cannot be reached."""
        ...


class ScreenTool:
    """Runs ``screen`` actions for callers already authorised on the relay."""

    def __init__(
        self,
        relays: RelayRequester,
        revisions: RevisionStore,
        audit: AuditWriter,
        issuers: RevisionIssuers | None = None,
    ):
        self.relays = relays
        self.revisions = revisions
        self.audit = audit
        self.issuers = issuers

    async def run(self, caller: Caller, body: Any, *, forwarded: bool = False) -> dict[str, Any]:
        """Check, run and audit one action; raises ``OpError`` (audited too). ``forwarded``:
        another replica sent the call here, where its revision was issued."""
        started = time.perf_counter()
        attempt = _Attempt()
        try:
            attempt.request = parse(body)
            attempt.session = attempt.request.desktop_session_id
        except OpError as err:
            await self._audit(caller, None, body, None, err)
            raise
        action = attempt.request.action
        try:
            issuer = None if forwarded else self._issued_elsewhere(attempt.request)
            if issuer is not None:
                return await self._run_at(issuer, caller, attempt, body)
            return await self._run_here(caller, attempt, body)
        finally:
            if not forwarded:  # timed once, where the call came in
                SCREEN_SECONDS.labels(action).observe(time.perf_counter() - started)

    async def _run_here(self, caller: Caller, attempt: _Attempt, body: Any) -> dict[str, Any]:
        try:
            result = await self._run(caller, attempt)
            attempt.session = result.get("desktop_session_id", attempt.session)
        except OpError as err:
            await self._audit(caller, attempt.request, body, attempt.session, err)
            raise
        await self._audit(caller, attempt.request, body, attempt.session, None, result)
        return result

    def _issued_elsewhere(self, request: ScreenRequest) -> str | None:
        """The replica whose capture the call needs, when that is another one."""
        if self.issuers is None or not request.uses_revision:
            return None
        return self.revisions.issued_elsewhere(request.revision)

    async def _run_at(
        self, issuer: str, caller: Caller, attempt: _Attempt, body: dict[str, Any]
    ) -> dict[str, Any]:
        """Run the call on replica ``issuer``, which audits it; a gone one is audited here."""
        assert self.issuers is not None and attempt.request is not None
        try:
            return await self.issuers.run(issuer, caller, body, attempt.request.timeout_s)
        except IssuerGone as gone:
            log.info("screen revision of replica %s: %s", issuer, gone.message)
            err = OpError(
                ErrorCode.REVISION_EXPIRED,
                "the screenshot of this screen_revision is no longer kept (the server replica "
                "that took it is gone); take a new one",
                {"reason": "replica_gone"},
            )
            await self._audit(caller, attempt.request, body, attempt.session, err)
            raise err from None

    async def refused(self, caller: Caller, body: Any, error: OpError) -> None:
        """Audit a call refused before it reached the tool (e.g. an invisible relay)."""
        try:
            request: ScreenRequest | None = parse(body)
        except OpError:
            request = None
        await self._audit(caller, request, body, None, error)

    async def _run(self, caller: Caller, attempt: _Attempt) -> dict[str, Any]:
        assert attempt.request is not None
        kept = self._kept(caller, attempt.request)
        frame = await self._frame(caller, attempt.request, kept)
        request = attempt.request = attempt.request.placed(frame)
        if request.action in IMAGE_ACTIONS:
            return await self._picture(caller, request)
        if request.at_pointer:
            assert kept is not None
            pointer = await self._pointer(caller, request, kept)
            request = attempt.request = request.pointed(pointer)
        args = dict(request.relay_args)
        if request.desktop_session_id is not None:
            args["desktop_session_id"] = request.desktop_session_id
        if not request.guarded:
            return _public(request, await self._relay(caller, request, args))
        assert kept is not None
        try:
            return _public(request, await self._guarded(caller, request, args, kept))
        except OpError as err:
            if err.code is ErrorCode.STALE_SCREEN:
                raise self._stale(err, request, kept) from None
            raise

    async def _guarded(
        self, caller: Caller, request: ScreenRequest, args: dict[str, Any], kept: KeptCapture
    ) -> dict[str, Any]:
        """The relay's answer to a guarded action: sent with the reference's digest to a relay
        that takes one, and with the crop itself when the region is not exactly as captured."""
        reference = await _guard_reference(request, kept)
        args = {**args, "revision_target": reference.target}
        if DIGEST_CAPABILITY in self.relays.capabilities(caller.relay):
            try:
                return await self._relay(caller, request, {**args, "guard": reference.digest()})
            except OpError as err:
                if err.details.get("reason") != DIGEST_DIFFERS:
                    raise
        return await self._relay(caller, request, {**args, "guard": reference.crop()})

    async def _relay(
        self,
        caller: Caller,
        request: ScreenRequest,
        args: dict[str, Any],
        action: ScreenAction | None = None,
    ) -> dict[str, Any]:
        if request.local and request.desktop_session_id is None:
            # The relay's local desktop (its host's real screen), by kind: the same op as for
            # any other desktop; the relay's host helper runs it on the host display.
            args["kind"] = "local"
        spec = ops.SCREEN[action or request.action]
        result = await call(
            self.relays, caller.relay, spec, cast(ops.ScreenArgs, args), request.timeout_s
        )
        return dict(result)

    async def _picture(self, caller: Caller, request: ScreenRequest) -> dict[str, Any]:
        """A screenshot or zoom: the relay's picture, its capture kept under a new revision."""
        args = dict(request.relay_args)
        if request.desktop_session_id is not None:
            args["desktop_session_id"] = request.desktop_session_id
        try:
            result = await self._relay(caller, request, args)
        except OpError as err:
            if err.code is ErrorCode.LIMIT_REACHED:
                message = (
                    f"{err.message}: this screenshot is too large to carry; a smaller desktop "
                    "geometry (or zoom region), or a larger RELAYDESK_MAX_TEXT_FRAME on the "
                    "server, fits it"
                )
                raise OpError(err.code, message, err.details) from None
            raise
        # A plain PNG is its own capture; other images come with the capture's PNG.
        image = result.get("image") if result.get("format") == "png" else None
        capture = Capture.from_wire(result.get("capture"), image)
        view = _view(request, result)
        if (capture.width, capture.height) != (view.region.width, view.region.height):
            raise OpError(ErrorCode.PROTOCOL_ERROR, "the relay's capture and image differ in size")
        binding = Binding(
            caller.relay, str(result.get("desktop_session_id")), str(result.get("display"))
        )
        public = _public(request, result)
        public["screen_revision"] = self.revisions.keep(binding, capture, view)
        return public

    def _kept(self, caller: Caller, request: ScreenRequest) -> KeptCapture | None:
        """The capture a guarded action was chosen on (required), or the one whose frame an
        unguarded action's coordinates refer to (when it names one and needs it)."""
        if request.guarded and request.revision is None:
            raise OpError(
                ErrorCode.MISSING_SCREEN_REVISION,
                f"{request.action} needs expected_screen_revision: the screen_revision of the "
                "screenshot (or zoom) the point was chosen on",
            )
        if not request.uses_revision:
            return None
        return self.revisions.lookup(request.revision, caller.relay, request.desktop_session_id)

    async def _frame(
        self, caller: Caller, request: ScreenRequest, kept: KeptCapture | None
    ) -> Frame:
        """What the request's numbers mean in screen pixels."""
        if not request.has_coordinates or request.coordinates == "pixels":
            return Frame.pixels()  # nothing to convert (a grid is labelled by the relay)
        if request.coordinates == "zoom":
            if kept is None:
                raise InvalidArgs(
                    "expected_screen_revision",
                    "zoom coordinates need the screen_revision of the zoom they were read on",
                )
            if not kept.view.zoom:
                raise InvalidArgs(
                    "coordinates",
                    "zoom coordinates need a zoom's screen_revision; this one is a screenshot's, "
                    "whose pixels are screen pixels: use coordinates pixels",
                )
            return Frame.zoom(kept.view.region, kept.view.image)
        if request.relative_to is not None:
            return Frame.normalized(request.relative_to)
        screen = kept.view.screen if kept is not None else await self._screen_size(caller, request)
        return Frame.normalized(CropRect(0, 0, *screen))

    async def _screen_size(self, caller: Caller, request: ScreenRequest) -> tuple[int, int]:
        """The target's screen size now (normalized coordinates without a revision)."""
        args: dict[str, Any] = {}
        if request.desktop_session_id is not None:
            args["desktop_session_id"] = request.desktop_session_id
        result = await self._relay(caller, request, args, "screen_size")
        width, height = result.get("width"), result.get("height")
        if not (_positive(width) and _positive(height)):
            raise OpError(ErrorCode.PROTOCOL_ERROR, "the relay's screen size is not a size")
        return cast(int, width), cast(int, height)

    async def _pointer(
        self, caller: Caller, request: ScreenRequest, kept: KeptCapture
    ) -> tuple[int, int]:
        """Where the pointer is now, for a guarded action given no point (``mouse_down``): the
        point the guard checks and the relay presses at. It must lie on the picture the
        revision shows."""
        args: dict[str, Any] = {}
        if request.desktop_session_id is not None:
            args["desktop_session_id"] = request.desktop_session_id
        result = await self._relay(caller, request, args, "mouse_position")
        x, y = result.get("x"), result.get("y")
        if type(x) is not int or type(y) is not int:
            raise OpError(ErrorCode.PROTOCOL_ERROR, "the relay's pointer position is not a point")
        region = kept.view.region
        if not region.contains((x, y)):
            raise InvalidArgs(
                "x",
                f"{request.action} without x, y acts where the pointer is, ({x}, {y}), which is "
                f"outside what this screen_revision shows ({region.width}x{region.height} at "
                f"({region.x}, {region.y})); give x and y, or take a screenshot",
            )
        return x, y

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
                AuditRow(
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
            )
        except Exception:
            log.exception("writing the screen audit row failed")


@dataclass
class _Attempt:
    """One call as far as it got: the request (converted once placed) and its session."""

    request: ScreenRequest | None = None
    session: str | None = None


def _positive(value: object) -> bool:
    return type(value) is int and value > 0


def _view(request: ScreenRequest, result: dict[str, Any]) -> View:
    """What the relay's picture shows, checked against what was asked."""
    width, height = result.get("width"), result.get("height")
    if not (_positive(width) and _positive(height)):
        raise OpError(ErrorCode.PROTOCOL_ERROR, "the relay's picture has no size")
    image = (cast(int, width), cast(int, height))
    if request.action == "screenshot":
        return View.whole(*image)
    assert request.geometry is not None and request.geometry.region is not None
    region = request.geometry.region
    scale = request.relay_args.get("scale", 1)
    screen = result.get("screen")
    if (
        image != zoom_size(region.width, region.height, scale)
        or not isinstance(screen, dict)
        or not (_positive(screen.get("width")) and _positive(screen.get("height")))
    ):
        raise OpError(ErrorCode.PROTOCOL_ERROR, "the relay's zoom is not the one asked for")
    return View((screen["width"], screen["height"]), region, image, zoom=True)


@dataclass(frozen=True)
class _GuardReference:
    """The pixels a guarded action's point was chosen on, and the desktop they were taken of."""

    pixels: RGBArray
    rect: CropRect
    target: dict[str, str]

    def digest(self) -> dict[str, Any]:
        return {"digest": crop_digest(self.pixels), "rect": self.rect.to_dict()}

    def crop(self) -> dict[str, Any]:
        return {"crop": encode_crop(self.pixels), "rect": self.rect.to_dict()}


# Crops up to this size (the default 128x96 is 12,288 pixels) are cut on the event loop: it
# inflates one or two bands (~0.1 ms), less than a hop to a worker thread costs.
_INLINE_CROP_PIXELS = 32 * 1024


async def _guard_reference(request: ScreenRequest, kept: KeptCapture) -> _GuardReference:
    """The reference crop for a guarded action, from the kept capture."""
    geometry = request.geometry
    assert geometry is not None and geometry.point is not None
    view = kept.view
    # A point read from the pointer (mouse_down without one) is reported as x, y.
    fields = ("x", "y") if request.point is None else request.point.fields
    _on_picture(geometry.point, view, fields)
    if geometry.end is not None and request.end is not None:
        _on_screen(geometry.end, view, request.end.fields)
    region = view.region
    # The guard's geometry within the kept picture (a zoom: its region), then on the screen.
    local = (geometry.point[0] - region.x, geometry.point[1] - region.y)
    bbox = geometry.target_bbox
    local_bbox = (
        None if bbox is None else (bbox.x - region.x, bbox.y - region.y, bbox.width, bbox.height)
    )
    rect = crop_rect(local, (region.width, region.height), local_bbox)
    if rect.width * rect.height <= _INLINE_CROP_PIXELS:
        crop = kept.capture.region(rect)
    else:
        crop = await asyncio.to_thread(kept.capture.region, rect)
    on_screen = CropRect(rect.x + region.x, rect.y + region.y, rect.width, rect.height)
    binding = kept.revision.binding
    target = {"desktop_session_id": binding.desktop_session_id, "display": binding.display}
    return _GuardReference(crop, on_screen, target)


def _on_picture(point: tuple[int, int], view: View, fields: tuple[str, ...]) -> None:
    """A guarded point must lie on the picture it was chosen on: never clamped."""
    if not view.zoom:
        _on_screen(point, view, fields)
        return
    region = view.region
    for name, value, low, size in (
        (fields[0], point[0], region.x, region.width),
        (fields[1], point[1], region.y, region.height),
    ):
        if not low <= value < low + size:
            raise InvalidArgs(
                name,
                f"{value} is outside the zoomed region ({name[-1]} {low}..{low + size - 1}) of "
                "this zoom's screen_revision; choose a point on the zoom, or take a screenshot",
            )


def _on_screen(point: tuple[int, int], view: View, fields: tuple[str, ...]) -> None:
    """Coordinates are pixels of the full-resolution screenshot: never clamped."""
    width, height = view.screen
    for name, value, limit in ((fields[0], point[0], width), (fields[1], point[1], height)):
        if not 0 <= value < limit:
            raise InvalidArgs(
                name,
                f"{value} is outside the {width}x{height} screenshot "
                f"(0..{limit - 1}); coordinates are full-resolution pixels",
            )


def _public(request: ScreenRequest, result: dict[str, Any]) -> dict[str, Any]:
    """What the caller sees: no host details, and every answer marked as the pixel path's."""
    public = {k: v for k, v in result.items() if k not in _PRIVATE_RESULT_KEYS}
    if request.action == "keyboard_state" and "source" in public:
        public["lock_source"] = public.pop("source")  # how the locks were read: LEDs or not
    public["source"] = VISION_SOURCE
    return public


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
