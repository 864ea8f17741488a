"""Action registry, schemas and audit scrubbing, without a server."""

from __future__ import annotations

from typing import Any

import pytest

from server.actions.audit import scrub
from server.actions.desktop import DESKTOP_ACTIONS
from server.actions.errors import error_body, status_of
from server.actions.registry import Action, ActionRegistry, tool_schema
from server.actions.schema import validate, with_defaults
from wire.errors import ErrorCode, InvalidArgs, OpError, SessionConflict

pytestmark = pytest.mark.unit

START = next(a for a in DESKTOP_ACTIONS if a.name == "desktop_start")


async def _noop(ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
    return {}


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({}, "conversation_id"),
        ({"conversation_id": 5}, "conversation_id"),
        ({"conversation_id": "c", "slot": "Bad Slot"}, "slot"),
        ({"conversation_id": "c", "depth": 8}, "depth"),
        ({"conversation_id": "c", "depth": True}, "depth"),
        ({"conversation_id": "c", "audio": "no"}, "audio"),
        ({"conversation_id": "c", "extra": 1}, "extra"),
        ({"conversation_id": "c", "geometry": "big"}, "geometry"),
    ],
)
def test_schema_violations_name_the_field(args: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidArgs) as caught:
        validate(START.json_schema, args)
    assert caught.value.details["field"] == field


def test_defaults_fill_only_absent_arguments() -> None:
    args = with_defaults(START.json_schema, {"conversation_id": "c", "slot": "agent"})
    assert (args["slot"], args["kind"], args["geometry"]) == ("agent", "virtual", "1280x800")


def test_every_action_requires_a_conversation_and_is_a_tool_definition() -> None:
    registry = ActionRegistry(DESKTOP_ACTIONS)
    for definition in registry.definitions():
        assert definition["input_schema"]["required"][0] == "conversation_id"
        assert definition["description"] and definition["required_role"] in ("read", "write")
    with pytest.raises(ValueError, match="already registered"):
        registry.register(START)
    with pytest.raises(ValueError, match="conversation_id"):
        registry.register(Action("bad", "read", {"type": "object"}, "d", _noop))
    registry.register(Action("screen", "write", tool_schema({}), "the screen tool", _noop))
    assert "screen" in registry.names()


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (InvalidArgs("slot", "bad"), 400),
        (OpError(ErrorCode.FORBIDDEN), 403),
        (OpError(ErrorCode.RELAY_NOT_FOUND), 404),
        (SessionConflict("abc"), 409),
        (OpError(ErrorCode.NOT_RUNNING), 409),
        (OpError(ErrorCode.RELAY_UNREACHABLE), 502),
        (OpError(ErrorCode.RELAY_TIMEOUT), 504),
    ],
)
def test_error_statuses_and_bodies(error: OpError, status: int) -> None:
    assert status_of(error) == status
    body = error_body(error)
    assert body["ok"] is False and body["error"]["code"] == error.code.value


def test_conflict_body_carries_the_current_session_and_hides_other_details() -> None:
    body = error_body(SessionConflict("b" * 32))
    assert body["error"]["current_session_id"] == "b" * 32
    leaky = OpError(ErrorCode.START_FAILED, "x", {"log_path": "/var/log/x"})
    assert "log_path" not in error_body(leaky)["error"]


def test_scrub_removes_tokens_and_host_paths() -> None:
    reason = "failed: /home/alice/.local/state/relaydesk/x.log token rdk_abc123XYZ and ok"
    clean = scrub(reason)
    assert clean is not None
    assert "/home" not in clean and "rdk_" not in clean and clean.endswith("and ok")
    assert scrub(None) is None and len(scrub("x" * 500) or "") == 200


# -- what each role may see ---------------------------------------------------------------

# A ``read`` member sees the inventory, status, the transcript and who is in control, and may
# list and read (download) the files of a desktop's home (docs/files.md); these are the actions
# it may call. Any other action returns desktop content or changes a desktop.
READ_ACTIONS = {
    "desktop_list_active",
    "desktop_status",
    "desktop_stop_request",
    "desktop_control",
    "desktop_files_list",
    "desktop_file_read",
}
# Actions that return what is on a desktop (pixels, accessibility text, clipboard, window titles,
# running apps) without changing it.
CONTENT_READS = {
    "screen",
    "desktop_apps",
    "desktop_observe",
    "desktop_find",
    "desktop_read",
    "desktop_wait",
    "desktop_windows",
    "desktop_clipboard_get",
    "safety_checks_list",
}


def _every_action() -> ActionRegistry:
    from server.actions.a11y import A11Y_ACTIONS
    from server.actions.control import CONTROL_ACTIONS
    from server.actions.desktop_apps import DESKTOP_APP_ACTIONS
    from server.actions.desktop_files import HOME_FILE_ACTIONS
    from server.actions.desktop_tools import DESKTOP_TOOL_ACTIONS
    from server.screen.action import SCREEN_ACTION

    return ActionRegistry(
        DESKTOP_ACTIONS
        + DESKTOP_APP_ACTIONS
        + A11Y_ACTIONS
        + CONTROL_ACTIONS
        + DESKTOP_TOOL_ACTIONS
        + HOME_FILE_ACTIONS
        + (SCREEN_ACTION,)
    )


def test_a_read_member_may_call_nothing_that_shows_desktop_content() -> None:
    registry = _every_action()
    actions = [a for a in map(registry.get, registry.names()) if a is not None]
    assert {a.name for a in actions if a.role == "read"} == READ_ACTIONS
    assert set(registry.names()) >= CONTENT_READS
    assert {a.name: a.role for a in actions if a.name in CONTENT_READS} == dict.fromkeys(
        CONTENT_READS, "write"
    )
