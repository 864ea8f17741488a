"""The server's screen tool with normalized coordinates, zoom revisions and grids, against a
scripted relay: the one conversion to screen pixels, and the guard of a zoom's region."""

from __future__ import annotations

import base64
import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from server.db.audit import AuditRow
from server.screen.action import SCREEN_ACTION
from server.screen.request import FIELDS, ScreenRequest, parse
from server.screen.revisions import RevisionStore
from server.screen.tool import Caller, ScreenTool
from tests.support.examples import examples
from wire import ops
from wire.capture import BandedPng
from wire.errors import ErrorCode, InvalidArgs, OpError
from wire.guard import CropRect, decode_crop
from wire.screen_coords import Frame

pytestmark = pytest.mark.unit

WIDTH, HEIGHT = 400, 250
SESSION, DISPLAY = "sess-1", ":7"
CALLER = Caller("alice", "conv-1", "relay-1")
ZOOMED = {"x": 200, "y": 100, "width": 100, "height": 50}


def _screen() -> np.ndarray:
    pixels = np.zeros((HEIGHT, WIDTH, 3), np.uint8)
    pixels[:, :, 0] = (np.arange(WIDTH) % 256).astype(np.uint8)[None, :]
    pixels[:, :, 1] = np.arange(HEIGHT, dtype=np.uint8)[:, None]
    pixels[:, :, 2] = 7
    return pixels


def _png(pixels: np.ndarray) -> tuple[BandedPng, str]:
    capture = BandedPng.from_pixels(np.ascontiguousarray(pixels))
    return capture, base64.b64encode(capture.data).decode()


class FakeRelay:
    """Answers ``screen.*`` like a relay; remembers every request."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.answers: dict[str, dict[str, Any]] = {}

    def capabilities(self, relay_id: Any) -> frozenset[str]:
        return frozenset()

    async def request(
        self, relay_id: Any, op: str, args: dict[str, Any] | None = None, timeout_s: float = 30
    ) -> Any:
        args = dict(args or {})
        self.requests.append((op, args))
        ops.check_args(ops.OPS[op], args)  # what the relay takes for this action
        where = {"desktop_session_id": SESSION, "display": DISPLAY}
        if op in self.answers:
            return {**self.answers[op], **where}
        if op == "screen.screenshot":
            capture, text = _png(_screen())
            return {
                "width": WIDTH,
                "height": HEIGHT,
                "format": "png",
                "image": text,
                "capture": capture.to_wire(with_png=False),
                **where,
            }
        if op == "screen.zoom":
            return self._zoom(args) | where
        if op == "screen.screen_size":
            return {"width": WIDTH, "height": HEIGHT, **where}
        if op == "screen.keyboard_state":
            return {
                "num_lock": True,
                "caps_lock": False,
                "scroll_lock": False,
                "source": "led_mask",
                **where,
            }
        return {"ok_from_relay": op, **where}

    def _zoom(self, args: dict[str, Any]) -> dict[str, Any]:
        r = args["region"]
        pixels = _screen()[r["y"] : r["y"] + r["height"], r["x"] : r["x"] + r["width"]]
        capture, text = _png(pixels)
        scale = int(args.get("scale", 1))
        shown = pixels.repeat(scale, axis=0).repeat(scale, axis=1)
        image = text if scale == 1 else _png(shown)[1]
        return {
            "width": r["width"] * scale,
            "height": r["height"] * scale,
            "format": "png",
            "image": image,
            "coordinates": "zoom",
            "region": r,
            "scale": scale,
            "screen": {"width": WIDTH, "height": HEIGHT},
            "capture": capture.to_wire(with_png=scale != 1),
        }


class FakeAudit:
    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []

    async def write_audit(self, row: AuditRow) -> None:
        self.rows.append(vars(row))


@pytest.fixture
def relay() -> FakeRelay:
    return FakeRelay()


@pytest.fixture
def audit() -> FakeAudit:
    return FakeAudit()


@pytest.fixture
def tool(relay: FakeRelay, audit: FakeAudit) -> ScreenTool:
    return ScreenTool(relay, RevisionStore("k"), audit)


async def _refused(tool: ScreenTool, body: dict[str, Any], code: ErrorCode) -> dict[str, Any]:
    with pytest.raises(OpError) as error:
        await tool.run(CALLER, body)
    assert error.value.code is code, error.value
    return error.value.details


# -- normalized --------------------------------------------------------------------------------


async def test_a_normalized_click_is_converted_once_and_guarded_at_that_pixel(tool, relay, audit):
    shot = await tool.run(CALLER, {"action": "screenshot"})
    revision = shot["screen_revision"]
    await tool.run(
        CALLER, {"action": "click", "x": 100, "y": 100, "expected_screen_revision": revision}
    )
    by_pixels = relay.requests[-1][1]
    sent = len(relay.requests)
    # 250/1000 of 400 = 100, 400/1000 of 250 = 100: the same pixel, the same guard
    result = await tool.run(
        CALLER,
        {
            "action": "click",
            "x": 250,
            "y": 400,
            "coordinates": "normalized",
            "expected_screen_revision": revision,
        },
    )
    assert len(relay.requests) == sent + 1  # the size came from the revision: no extra call
    op, args = relay.requests[-1]
    assert op == "screen.click" and args == by_pixels
    assert (args["x"], args["y"]) == (100, 100)
    assert result["source"] == "vision"
    details = audit.rows[-1]["details"]
    assert (details["x"], details["y"], details["coordinates"]) == (100, 100, "normalized")


async def test_a_normalized_move_without_a_revision_asks_the_screen_size(tool, relay):
    await tool.run(CALLER, {"action": "move", "x": 1000, "y": 0, "coordinates": "normalized"})
    assert [op for op, _ in relay.requests] == ["screen.screen_size", "screen.move"]
    assert relay.requests[-1][1] == {"x": WIDTH - 1, "y": 0}


async def test_relative_to_spans_its_region_and_needs_no_screen_size(tool, relay):
    body = {
        "action": "scroll",
        "x": 500,
        "y": 500,
        "coordinates": "normalized",
        "relative_to": {"x": 100, "y": 50, "width": 200, "height": 100},
    }
    await tool.run(CALLER, body)
    assert [op for op, _ in relay.requests] == ["screen.scroll"]
    args = relay.requests[-1][1]
    assert (args["x"], args["y"]) == (200, 100)


async def test_a_normalized_drag_converts_both_ends(tool, relay):
    shot = await tool.run(CALLER, {"action": "screenshot"})
    await tool.run(
        CALLER,
        {
            "action": "drag",
            "from": {"x": 0, "y": 0},
            "to": [1000, 500],
            "coordinates": "normalized",
            "expected_screen_revision": shot["screen_revision"],
        },
    )
    args = relay.requests[-1][1]
    assert (args["x"], args["y"], args["to_x"], args["to_y"]) == (0, 0, WIDTH - 1, 125)


# -- zoom --------------------------------------------------------------------------------------


async def test_a_zoom_keeps_its_region_under_its_own_revision(tool, relay):
    body = {
        "action": "zoom",
        "region": {"x": 200, "y": 100, "width": 100, "height": 50},
        "scale": 2,
        "grid": True,
    }
    zoom = await tool.run(CALLER, body)
    op, args = relay.requests[-1]
    assert op == "screen.zoom"
    assert args == {
        "format": "png",
        "scale": 2,
        "grid": {"coordinates": "pixels"},
        "region": {"x": 200, "y": 100, "width": 100, "height": 50},
    }
    assert (zoom["width"], zoom["height"], zoom["source"]) == (200, 100, "vision")
    assert "capture" not in zoom and "display" not in zoom
    kept = tool.revisions.lookup(zoom["screen_revision"], "relay-1", SESSION)
    assert kept.view.zoom and kept.view.image == (200, 100) and kept.view.screen == (WIDTH, HEIGHT)
    assert np.array_equal(kept.capture.pixels(), _screen()[100:150, 200:300])
    # the hint after a stale click names screenshots, not zooms
    assert tool.revisions.latest(kept.revision.binding) is None


async def test_a_normalized_zoom_region_covers_every_pixel_it_touches(tool, relay):
    region = {"x": 500, "y": 0, "width": 250.1, "height": 100}
    await tool.run(CALLER, {"action": "zoom", "coordinates": "normalized", "region": region})
    assert relay.requests[-1][1]["region"] == {"x": 200, "y": 0, "width": 101, "height": 25}


async def test_a_click_on_a_zoom_is_guarded_against_the_zoomed_region(tool, relay):
    zoom = await tool.run(CALLER, {"action": "zoom", "scale": 2, "region": ZOOMED})
    revision = zoom["screen_revision"]
    await tool.run(
        CALLER, {"action": "click", "x": 210, "y": 140, "expected_screen_revision": revision}
    )
    args = relay.requests[-1][1]
    # the default 128x96 crop around the point, cut to the zoomed region, on the screen
    assert args["guard"]["rect"] == {"x": 200, "y": 100, "width": 74, "height": 50}
    assert np.array_equal(decode_crop(args["guard"]["crop"]), _screen()[100:150, 200:274])
    # the same point in the zoom image's own pixels: (210-200)*2, (140-100)*2
    await tool.run(
        CALLER,
        {
            "action": "click",
            "x": 20,
            "y": 80,
            "coordinates": "zoom",
            "expected_screen_revision": revision,
        },
    )
    assert relay.requests[-1][1] == args


async def test_a_point_outside_the_zoom_is_refused_before_the_relay(tool, relay):
    zoom = await tool.run(CALLER, {"action": "zoom", "region": ZOOMED})
    sent = len(relay.requests)
    details = await _refused(
        tool,
        {"action": "click", "x": 20, "y": 120, "expected_screen_revision": zoom["screen_revision"]},
        ErrorCode.INVALID_ARGS,
    )
    assert details["field"] == "x"
    details = await _refused(
        tool,
        {
            "action": "click",
            "x": 100,
            "y": 80,
            "coordinates": "zoom",
            "expected_screen_revision": zoom["screen_revision"],
        },
        ErrorCode.INVALID_ARGS,
    )
    assert details["field"] == "x"  # zoom pixels run 0..99 here
    assert len(relay.requests) == sent


async def test_zoom_coordinates_need_a_zooms_revision(tool, relay):
    shot = await tool.run(CALLER, {"action": "screenshot"})
    details = await _refused(
        tool, {"action": "move", "x": 1, "y": 1, "coordinates": "zoom"}, ErrorCode.INVALID_ARGS
    )
    assert details["field"] == "expected_screen_revision"
    details = await _refused(
        tool,
        {
            "action": "click",
            "x": 1,
            "y": 1,
            "coordinates": "zoom",
            "expected_screen_revision": shot["screen_revision"],
        },
        ErrorCode.INVALID_ARGS,
    )
    assert details["field"] == "coordinates"
    await _refused(
        tool,
        {"action": "click", "x": 1, "y": 1, "coordinates": "zoom"},
        ErrorCode.MISSING_SCREEN_REVISION,
    )


async def test_a_relay_zoom_of_another_size_is_a_protocol_error(tool, relay):
    relay.answers["screen.zoom"] = relay._zoom(
        {"region": {"x": 0, "y": 0, "width": 10, "height": 10}, "scale": 2}
    )
    body = {"action": "zoom", "region": {"x": 0, "y": 0, "width": 10, "height": 10}}
    await _refused(tool, body, ErrorCode.PROTOCOL_ERROR)


# -- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"action": "move", "x": 1000.5, "y": 3, "coordinates": "normalized"}, "x"),
        ({"action": "move", "x": 5, "y": -1, "coordinates": "normalized"}, "y"),
        ({"action": "move", "x": 5.5, "y": 1}, "x"),
        ({"action": "zoom"}, "region"),
        ({"action": "zoom", "region": {"x": 0, "y": 0, "width": 0, "height": 5}}, "region.width"),
        ({"action": "zoom", "region": [0, 0, 5, 5], "scale": 4.5}, "scale"),
        ({"action": "zoom", "region": [0, 0, 5, 5], "scale": 0.5}, "scale"),
        ({"action": "zoom", "region": [0, 0, 1500, 1100], "scale": 4}, "scale"),
        (
            {"action": "zoom", "region": [900, 0, 200, 5], "coordinates": "normalized"},
            "region.width",
        ),
        ({"action": "zoom", "region": {"x": 0, "y": 0}}, "region"),
        ({"action": "zoom", "region": [0, 0, 5, 5], "coordinates": "zoom"}, "coordinates"),
        ({"action": "screenshot", "grid": "yes"}, "grid"),
        ({"action": "move", "x": 1, "y": 1, "relative_to": [0, 0, 5, 5]}, "relative_to"),
        (
            {
                "action": "move",
                "x": 1,
                "y": 1,
                "coordinates": "normalized",
                "relative_to": {"x": 0, "y": 0, "width": 5},
            },
            "relative_to",
        ),
        (
            {
                "action": "move",
                "x": 1,
                "y": 1,
                "coordinates": "normalized",
                "relative_to": [0, 0, 0, 5],
            },
            "relative_to.width",
        ),
        (
            {
                "action": "move",
                "x": 1,
                "y": 1,
                "coordinates": "normalized",
                "relative_to": [0, 0, 5.5, 5],
            },
            "relative_to.width",
        ),
        ({"action": "move", "x": 1, "y": 1, "coordinates": "degrees"}, "coordinates"),
    ],
)
async def test_bad_input_is_refused_naming_the_field(tool, relay, body, field):
    details = await _refused(tool, body, ErrorCode.INVALID_ARGS)
    assert details["field"] == field
    assert [op for op, _ in relay.requests if op != "screen.screen_size"] == []


# -- every answer is marked ----------------------------------------------------------------------


async def test_every_answer_is_marked_as_vision(tool):
    answers = [
        await tool.run(CALLER, {"action": action})
        for action in ("screenshot", "screen_size", "mouse_position", "keyboard_state")
    ]
    answers.append(await tool.run(CALLER, {"action": "type", "text": "x"}))
    assert all(answer["source"] == "vision" for answer in answers)
    # keyboard_state's own source (how the locks were read) keeps its own name
    assert answers[3]["lock_source"] == "led_mask" and answers[3]["num_lock"] is True


def test_the_schema_offers_the_new_fields_to_an_agent() -> None:
    schema = SCREEN_ACTION.definition()["input_schema"]["properties"]
    assert "zoom" in schema["action"]["enum"]
    assert schema["coordinates"]["enum"] == ["pixels", "normalized", "zoom"]
    assert schema["coordinates"]["default"] == "pixels"
    assert (schema["scale"]["minimum"], schema["scale"]["maximum"]) == (1, 4)
    for name in ("relative_to", "region", "grid", "scale"):
        assert schema[name]["description"], name
    assert "0..1000" in schema["coordinates"]["description"]


# -- fuzz ----------------------------------------------------------------------------------------

_NUMBERS = st.one_of(
    st.integers(-70_000, 70_000),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, 1, 999, 1000, 1001, 0.5, -0.0]),
)
_VALUES = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        _NUMBERS,
        st.text(max_size=8),
        st.sampled_from(["pixels", "normalized", "zoom", "zoom", "screenshot", "click"]),
    ),
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.dictionaries(st.sampled_from(["x", "y", "width", "height", "z"]), inner, max_size=5)
    ),
    max_leaves=12,
)
_BODIES = st.dictionaries(st.sampled_from([*sorted(FIELDS), "bogus"]), _VALUES, max_size=8)
_FRAMES = (
    Frame.pixels(),
    Frame.normalized(CropRect(0, 0, 1280, 800)),
    Frame.normalized(CropRect(-50, 10, 3, 7)),
    Frame.zoom(CropRect(100, 50, 33, 20), (99, 60)),
)


def _outcome(make: Callable[[], ScreenRequest]) -> ScreenRequest | str:
    """What ``make`` returns, or the field its ``InvalidArgs`` names."""
    try:
        return make()
    except InvalidArgs as err:
        return str(err.details["field"])


@settings(max_examples=examples(400), deadline=None)
@given(_BODIES, st.sampled_from(["zoom", "click", "drag", "move", "screenshot", "scroll"]))
def test_any_body_converts_to_pixels_or_names_a_field(body: dict[str, Any], action: str) -> None:
    body = {**body, "action": body.get("action", action)}
    request = _outcome(lambda: parse(body))
    if isinstance(request, str):
        assert request
        return
    for frame in _FRAMES:
        placed = _outcome(functools.partial(request.placed, frame))
        if isinstance(placed, str):
            assert placed
            continue
        geometry = placed.geometry
        for point in (None, None) if geometry is None else (geometry.point, geometry.end):
            assert point is None or all(type(v) is int for v in point)
        if geometry is not None and geometry.region is not None:
            assert geometry.region.width > 0 and geometry.region.height > 0
