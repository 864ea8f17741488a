"""The server's screen tool against a scripted relay: request checks, guard args, audit."""

from __future__ import annotations

import base64
from typing import Any

import numpy as np
import pytest

from server.db.audit import AuditRow
from server.screen.action import SCREEN_ACTION
from server.screen.request import parse
from server.screen.revisions import RevisionStore, View
from server.screen.tool import Caller, ScreenTool
from wire import ops
from wire.capture import BandedPng
from wire.errors import ErrorCode, InvalidArgs, OpError
from wire.guard import DIGEST_CAPABILITY, DIGEST_DIFFERS, CropRect, crop_digest, decode_crop

pytestmark = pytest.mark.unit

WIDTH, HEIGHT = 320, 200
SESSION, DISPLAY = "sess-1", ":7"
CALLER = Caller("alice", "conv-1", "relay-1")


def _screen() -> np.ndarray:
    pixels = np.zeros((HEIGHT, WIDTH, 3), np.uint8)
    pixels[:, :, 0] = np.arange(WIDTH, dtype=np.uint8)[None, :]
    pixels[:, :, 1] = np.arange(HEIGHT, dtype=np.uint8)[:, None]
    return pixels


class FakeRelay:
    """Answers ``screen.*`` like a relay; remembers every request."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, Any]]] = []
        self.error: OpError | None = None
        self.errors: list[OpError] = []  # raised once each, in order, before ``error``
        self.pointer = (100, 50)
        self.announced: frozenset[str] = frozenset()

    def capabilities(self, relay_id: Any) -> frozenset[str]:
        return self.announced

    async def request(
        self, relay_id: Any, op: str, args: dict[str, Any] | None = None, timeout_s: float = 30
    ) -> Any:
        self.requests.append((op, dict(args or {})))
        ops.check_args(ops.OPS[op], args or {})  # what the relay takes for this action
        if self.errors:
            raise self.errors.pop(0)
        if self.error is not None:
            raise self.error
        if op == "screen.screenshot":
            capture = BandedPng.from_pixels(_screen())
            return {
                "width": WIDTH,
                "height": HEIGHT,
                "format": "png",
                "image": base64.b64encode(capture.data).decode(),
                "coordinates": "full_resolution",
                "desktop_session_id": SESSION,
                "display": DISPLAY,
                "capture": capture.to_wire(with_png=False),
            }
        if op == "screen.mouse_position":
            x, y = self.pointer
            return {"x": x, "y": y, "desktop_session_id": SESSION, "display": DISPLAY}
        return {"ok_from_relay": op, "desktop_session_id": SESSION, "display": DISPLAY}


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


async def test_screenshot_keeps_the_capture_and_hides_host_details(tool, relay, audit):
    shot = await tool.run(CALLER, {"action": "screenshot"})
    assert "capture" not in shot and "display" not in shot
    assert shot["desktop_session_id"] == SESSION
    kept = tool.revisions.lookup(shot["screen_revision"], "relay-1", SESSION)
    assert kept.revision.binding.display == DISPLAY
    assert np.array_equal(kept.capture.pixels(), _screen())
    assert relay.requests == [("screen.screenshot", {"format": "png"})]
    assert audit.rows[-1]["details"] == {
        "action": "screenshot",
        "local": False,
        "format": "png",
        "guarded": False,
        "width": WIDTH,
        "height": HEIGHT,
    }


async def test_a_guarded_click_carries_the_reference_crop_and_target(tool, relay):
    shot = await tool.run(CALLER, {"action": "screenshot"})
    await tool.run(
        CALLER,
        {"action": "click", "x": 100, "y": 50, "expected_screen_revision": shot["screen_revision"]},
    )
    op, args = relay.requests[-1]
    assert op == "screen.click"
    assert args["revision_target"] == {"desktop_session_id": SESSION, "display": DISPLAY}
    rect = args["guard"]["rect"]
    assert rect == {"x": 36, "y": 2, "width": 128, "height": 96}
    crop = decode_crop(args["guard"]["crop"])
    assert np.array_equal(crop, _screen()[2:98, 36:164])
    assert "desktop_session_id" not in args  # the relay's default desktop, checked there


def _click_body(revision: str) -> dict[str, Any]:
    return {"action": "click", "x": 100, "y": 50, "expected_screen_revision": revision}


async def test_a_relay_taking_digests_gets_the_crops_digest_first(tool, relay):
    relay.announced = frozenset({DIGEST_CAPABILITY})
    shot = await tool.run(CALLER, {"action": "screenshot"})
    result = await tool.run(CALLER, _click_body(shot["screen_revision"]))
    assert result["ok_from_relay"] == "screen.click"
    op, args = relay.requests[-1]
    assert (op, len(relay.requests)) == ("screen.click", 2)  # one call: no pixels sent
    assert args["guard"] == {
        "digest": crop_digest(_screen()[2:98, 36:164]),
        "rect": {"x": 36, "y": 2, "width": 128, "height": 96},
    }
    assert args["revision_target"] == {"desktop_session_id": SESSION, "display": DISPLAY}


async def test_a_region_not_exactly_as_captured_is_judged_with_the_crop(tool, relay, audit):
    relay.announced = frozenset({DIGEST_CAPABILITY})
    shot = await tool.run(CALLER, {"action": "screenshot"})
    differs = OpError(ErrorCode.STALE_SCREEN, "differs", {"reason": DIGEST_DIFFERS})
    relay.errors = [differs]
    result = await tool.run(CALLER, _click_body(shot["screen_revision"]))
    assert result["ok_from_relay"] == "screen.click"
    (_, first), (_, second) = relay.requests[-2:]
    assert "digest" in first["guard"] and "crop" not in first["guard"]
    assert np.array_equal(decode_crop(second["guard"]["crop"]), _screen()[2:98, 36:164])
    assert second["guard"]["rect"] == first["guard"]["rect"]
    assert [row["outcome"] for row in audit.rows] == ["ok", "ok"]  # the screenshot, the click


async def test_a_stale_region_after_the_crop_is_stale_for_the_caller(tool, relay, audit):
    relay.announced = frozenset({DIGEST_CAPABILITY})
    shot = await tool.run(CALLER, {"action": "screenshot"})
    figures = {"difference": 0.4, "threshold": 0.06, "rect": {"x": 36}}
    relay.errors = [
        OpError(ErrorCode.STALE_SCREEN, "differs", {"reason": DIGEST_DIFFERS}),
        OpError(ErrorCode.STALE_SCREEN, "changed", figures),
    ]
    with pytest.raises(OpError) as caught:
        await tool.run(CALLER, _click_body(shot["screen_revision"]))
    assert caught.value.code is ErrorCode.STALE_SCREEN
    assert caught.value.details["difference"] == 0.4
    assert "reason" not in caught.value.details
    assert "(difference 0.4 > threshold 0.06)" in caught.value.message
    assert audit.rows[-1]["reason"] == "stale_screen"


async def test_a_real_stale_answer_to_the_digest_is_not_retried(tool, relay):
    relay.announced = frozenset({DIGEST_CAPABILITY})
    shot = await tool.run(CALLER, {"action": "screenshot"})
    relay.errors = [
        OpError(
            ErrorCode.STALE_SCREEN,
            "the screen size changed",
            {"difference": 1.0, "threshold": 0.06},
        )
    ]
    with pytest.raises(OpError) as caught:
        await tool.run(CALLER, _click_body(shot["screen_revision"]))
    assert caught.value.code is ErrorCode.STALE_SCREEN
    assert len(relay.requests) == 2  # the screenshot and one click: nothing resent


async def test_the_drag_start_is_guarded(tool, relay):
    shot = await tool.run(CALLER, {"action": "screenshot"})
    body = {
        "action": "drag",
        "from": {"x": 10, "y": 10},
        "to": [300, 190],
        "expected_screen_revision": shot["screen_revision"],
    }
    await tool.run(CALLER, body)
    _, args = relay.requests[-1]
    assert (args["x"], args["y"], args["to_x"], args["to_y"]) == (10, 10, 300, 190)
    assert args["guard"]["rect"]["x"] == 0  # clamped by intersection at the edge


async def test_stale_answers_carry_figures_and_a_hint(tool, relay):
    shot = await tool.run(CALLER, {"action": "screenshot"})
    newer = await tool.run(CALLER, {"action": "screenshot"})
    relay.error = OpError(
        ErrorCode.STALE_SCREEN,
        "stale",
        {"difference": 0.4, "threshold": 0.06, "mean_abs_delta": 0.2},
    )
    with pytest.raises(OpError) as info:
        await tool.run(
            CALLER,
            {
                "action": "click",
                "x": 5,
                "y": 5,
                "expected_screen_revision": shot["screen_revision"],
            },
        )
    details = info.value.details
    assert (details["difference"], details["threshold"]) == (0.4, 0.06)
    assert details["latest_screen_revision"] == newer["screen_revision"]
    assert "new screenshot" in details["hint"]
    assert "difference 0.4 > threshold 0.06" in info.value.message


async def test_refusals_send_nothing_to_the_relay(tool, relay, audit):
    shot = await tool.run(CALLER, {"action": "screenshot"})
    sent = len(relay.requests)
    cases = [
        ({"action": "click", "x": 1, "y": 1}, ErrorCode.MISSING_SCREEN_REVISION),
        (
            {
                "action": "click",
                "x": WIDTH,
                "y": 1,
                "expected_screen_revision": shot["screen_revision"],
            },
            ErrorCode.INVALID_ARGS,
        ),
        (
            {
                "action": "click",
                "x": 1,
                "y": 1,
                "target_bbox": [50, 50, 10, 10],
                "expected_screen_revision": shot["screen_revision"],
            },
            ErrorCode.INVALID_ARGS,
        ),
        (
            {
                "action": "click",
                "x": 1,
                "y": 1,
                "desktop_session_id": "other",
                "expected_screen_revision": shot["screen_revision"],
            },
            ErrorCode.REVISION_MISMATCH,
        ),
        ({"action": "teleport"}, ErrorCode.INVALID_ARGS),
    ]
    for body, code in cases:
        with pytest.raises(OpError) as info:
            await tool.run(CALLER, body)
        assert info.value.code is code, body
    assert len(relay.requests) == sent
    assert [row["reason"] for row in audit.rows[-len(cases) :]] == [c.value for _, c in cases]
    assert audit.rows[-1]["op"] == "screen.invalid"


async def test_audit_rows_never_hold_typed_text_or_key_names(tool, audit):
    await tool.run(CALLER, {"action": "type", "text": "p4ssw0rd"})
    await tool.run(CALLER, {"action": "key", "key": "ctrl+alt+Delete"})
    assert audit.rows[0]["details"]["text_length"] == 8
    assert audit.rows[1]["details"]["key_count"] == 3
    dumped = repr(audit.rows)
    assert "p4ssw0rd" not in dumped and "Delete" not in dumped


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"action": "click", "x": 1}, "y"),
        ({"action": "click", "x": "1", "y": 1}, "x"),
        ({"action": "type"}, "text"),
        ({"action": "key"}, "key"),
        ({"action": "scroll", "direction": "sideways"}, "direction"),
        ({"action": "scroll", "amount": 0}, "amount"),
        ({"action": "drag", "to": {"x": 1, "y": 1}}, "from"),
        ({"action": "drag", "from": {"x": 1, "y": 1}, "x": 1, "y": 1, "to": [2, 2]}, "from"),
        ({"action": "move", "x": 1, "y": 1, "target_bbox": [0, 0, 5, 5]}, "target_bbox"),
        ({"action": "screenshot", "format": "gif"}, "format"),
        ({"action": "screenshot", "timeout": 0}, "timeout"),
        ({"action": "screenshot", "bogus": 1}, "bogus"),
        ({"action": "click", "x": 1, "y": 1, "target_bbox": {"x": 0, "y": 0}}, "target_bbox"),
        ({"action": "mouse_down", "x": 1, "y": 1, "button": "fourth"}, "button"),
        ({"action": "mouse_down", "y": 1}, "x"),
        ({"action": "mouse_up", "button": "back"}, "button"),
        ({"action": "mouse_up", "target_bbox": [0, 0, 5, 5]}, "target_bbox"),
        ({"action": "key_down"}, "key"),
        ({"action": "key_down", "key": 5}, "key"),
        ({"action": "key_up"}, "key"),
        ({"action": "key_up", "key": "a" * 201}, "key"),
    ],
)
def test_bad_requests_name_the_field(body: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidArgs) as info:
        parse(body)
    assert info.value.details["field"] == field


def test_the_action_is_a_write_tool_with_an_llm_ready_schema() -> None:
    definition = SCREEN_ACTION.definition()
    schema = definition["input_schema"]
    assert definition["required_role"] == "write"
    assert schema["required"] == ["conversation_id", "action"]
    assert schema["properties"]["action"]["enum"][0] == "screenshot"
    for name in (
        "relay",
        "desktop_session_id",
        "local",
        "x",
        "y",
        "button",
        "text",
        "key",
        "amount",
        "direction",
        "from",
        "to",
        "target_bbox",
        "expected_screen_revision",
        "preview_max_width",
        "format",
        "timeout",
    ):
        assert name in schema["properties"], name
    assert "full-resolution" in schema["properties"]["x"]["description"].lower()


# -- held buttons and keys ---------------------------------------------------------------------


async def test_mouse_down_at_a_point_is_guarded_like_a_click(tool, relay, audit):
    shot = await tool.run(CALLER, {"action": "screenshot"})
    revision = shot["screen_revision"]
    with pytest.raises(OpError) as info:
        await tool.run(CALLER, {"action": "mouse_down", "x": 100, "y": 50})
    assert info.value.code is ErrorCode.MISSING_SCREEN_REVISION
    bbox = [90, 40, 30, 20]
    body = {
        "action": "mouse_down",
        "x": 100,
        "y": 50,
        "button": "right",
        "target_bbox": bbox,
        "expected_screen_revision": revision,
    }
    await tool.run(CALLER, body)
    op, args = relay.requests[-1]
    assert op == "screen.mouse_down"
    assert (args["x"], args["y"], args["button"]) == (100, 50, "right")
    assert args["revision_target"] == {"desktop_session_id": SESSION, "display": DISPLAY}
    rect = args["guard"]["rect"]
    assert rect["x"] <= 90 and rect["x"] + rect["width"] >= 120  # the box plus its margin
    assert audit.rows[-1]["details"]["guarded"] is True


async def test_mouse_down_without_a_point_guards_where_the_pointer_is(tool, relay, audit):
    shot = await tool.run(CALLER, {"action": "screenshot"})
    body = {"action": "mouse_down", "expected_screen_revision": shot["screen_revision"]}
    with pytest.raises(OpError) as info:
        await tool.run(CALLER, {"action": "mouse_down"})
    assert info.value.code is ErrorCode.MISSING_SCREEN_REVISION
    sent = len(relay.requests)
    result = await tool.run(CALLER, body)
    assert [op for op, _ in relay.requests[sent:]] == ["screen.mouse_position", "screen.mouse_down"]
    _, args = relay.requests[-1]
    # the point read is the point pressed and guarded (the same crop a click there gets)
    assert (args["x"], args["y"], args["button"]) == (100, 50, "left")
    assert args["guard"]["rect"] == {"x": 36, "y": 2, "width": 128, "height": 96}
    assert result["source"] == "vision"
    details = audit.rows[-1]["details"]
    assert (details["x"], details["y"], details["guarded"]) == (100, 50, True)


async def test_mouse_down_without_a_point_outside_a_zoom_is_refused(tool, relay):
    shot = await tool.run(CALLER, {"action": "screenshot"})
    relay.pointer = (300, 190)
    kept = tool.revisions.lookup(shot["screen_revision"], "relay-1", SESSION)
    region = View((WIDTH, HEIGHT), CropRect(0, 0, 50, 50), (50, 50), zoom=True)
    zoom = tool.revisions.keep(kept.revision.binding, kept.capture, region)
    with pytest.raises(InvalidArgs) as info:
        await tool.run(CALLER, {"action": "mouse_down", "expected_screen_revision": zoom})
    assert info.value.details["field"] == "x"
    assert "(300, 190)" in info.value.message and "pointer" in info.value.message
    assert relay.requests[-1][0] == "screen.mouse_position"  # nothing pressed


async def test_mouse_up_and_keys_are_unguarded_input(tool, relay, audit):
    for body, args in (
        ({"action": "mouse_up"}, {"button": "left"}),
        (
            {"action": "mouse_up", "x": 7, "y": 8, "button": "middle"},
            {"button": "middle", "x": 7, "y": 8},
        ),
        ({"action": "key_down", "key": "shift"}, {"keys": "shift"}),
        ({"action": "key_up", "key": "shift"}, {"keys": "shift"}),
    ):
        await tool.run(CALLER, body)
        assert relay.requests[-1] == (f"screen.{body['action']}", args)
        assert audit.rows[-1]["details"]["guarded"] is False
    # the audit counts a held key, never names it
    assert audit.rows[-1]["details"]["key_count"] == 1
    assert "shift" not in repr(audit.rows)


def test_the_schema_tells_an_agent_about_holding() -> None:
    schema = SCREEN_ACTION.definition()["input_schema"]["properties"]
    for action in ("mouse_down", "mouse_up", "key_down", "key_up"):
        assert action in schema["action"]["enum"]
        assert action in schema["action"]["description"]
    assert "key_down" in schema["key"]["description"]
    assert "mouse_down" in schema["expected_screen_revision"]["description"]
    assert "mouse_up" in schema["button"]["description"]
