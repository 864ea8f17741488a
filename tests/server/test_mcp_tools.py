"""The action registry as MCP tools, and answers as tool results, without a server."""

from __future__ import annotations

import base64
import json
from typing import Any

import mcp_types as types
import pytest

from server.actions.a11y import A11Y_ACTIONS
from server.actions.browser import BROWSER_ACTIONS
from server.actions.desktop import DESKTOP_ACTIONS
from server.actions.desktop_apps import DESKTOP_APP_ACTIONS
from server.actions.desktop_tools import DESKTOP_TOOL_ACTIONS
from server.actions.registry import Action, ActionRegistry, tool_schema
from server.mcp import tools
from wire.errors import InvalidArgs

pytestmark = pytest.mark.unit

PNG = base64.b64encode(b"\x89PNG picture").decode()
SMALL = base64.b64encode(b"\x89PNG small").decode()


async def _noop(ctx: Any, args: dict[str, Any]) -> dict[str, Any]:
    return {}


def _registry() -> ActionRegistry:
    return ActionRegistry(DESKTOP_ACTIONS + A11Y_ACTIONS)


def _text(result: types.CallToolResult) -> dict[str, Any]:
    first = result.content[0]
    assert isinstance(first, types.TextContent)
    answer: dict[str, Any] = json.loads(first.text)
    return answer


# Capabilities of a relay started with the shell opt-in (RELAYDESK_CUA_SHELL=1).
SHELL = frozenset({"shell"})


def test_a_tool_is_its_action_without_the_conversation() -> None:
    start = next(a for a in DESKTOP_ACTIONS if a.name == "desktop_start")
    tool = tools.tool_of(start)
    assert tool.name == "desktop_start" and tool.description == start.description
    assert "conversation_id" not in tool.input_schema["properties"]
    assert "conversation_id" not in tool.input_schema.get("required", [])
    assert tool.input_schema["additionalProperties"] is False
    assert tool.input_schema["properties"]["slot"] == start.json_schema["properties"]["slot"]
    assert "conversation_id" in start.json_schema["properties"]  # the action is untouched


def test_required_arguments_other_than_the_conversation_stay_required() -> None:
    action = Action("probe", "read", tool_schema({"x": {"type": "integer"}}, ("x",)), "d", _noop)
    assert tools.input_schema(action)["required"] == ["x"]


def test_a_read_member_gets_the_read_tools_only_and_they_say_so() -> None:
    registry = _registry()
    read = {t.name: t for t in tools.tools_for(registry, "read", SHELL)}
    write = {t.name: t for t in tools.tools_for(registry, "write", SHELL)}
    assert "desktop_list_active" in read and "desktop_stop_request" in read
    assert not {"desktop_start", "desktop_click", "desktop_observe", "desktop_read"} & set(read)
    assert (
        set(write)
        == set(registry.names())
        == {t.name for t in tools.tools_for(registry, "owner", SHELL)}
    )
    assert all(t.annotations and t.annotations.read_only_hint for t in read.values())
    # A content read needs write but changes nothing, and says so; an act does not.
    hints = {n: t.annotations and t.annotations.read_only_hint for n, t in write.items()}
    assert hints["desktop_observe"] and hints["desktop_find"] and not hints["desktop_click"]


def test_the_browser_tools_are_write_tools_and_the_acts_say_they_change_things() -> None:
    registry = ActionRegistry(DESKTOP_ACTIONS + BROWSER_ACTIONS)
    read = {t.name for t in tools.tools_for(registry, "read", SHELL)}
    write = {t.name: t for t in tools.tools_for(registry, "write", SHELL)}
    assert not {a.name for a in BROWSER_ACTIONS} & read
    hints = {n: t.annotations and t.annotations.read_only_hint for n, t in write.items()}
    for act in ("browser_click", "browser_select", "browser_hover", "browser_scroll"):
        assert not hints[act], act
    assert hints["browser_snapshot"] and hints["browser_screenshot"]
    select = write["browser_select"].input_schema
    assert {"ref", "value", "label", "expected_revision"} <= set(select["properties"])
    assert select["required"] == ["ref"]
    scroll = write["browser_scroll"].input_schema["properties"]
    assert scroll["dy"]["maximum"] == 100_000 and "ref" in scroll
    click = write["browser_click"].input_schema["properties"]["expected_revision"]
    assert click["pattern"].startswith("^bs")


def test_the_shell_and_file_tools_are_offered_only_where_a_relay_opts_in() -> None:
    registry = ActionRegistry(DESKTOP_ACTIONS + DESKTOP_TOOL_ACTIONS)
    without = {t.name for t in tools.tools_for(registry, "write", frozenset())}
    opted_in = {t.name for t in tools.tools_for(registry, "write", SHELL)}
    assert {"desktop_shell", "desktop_file"} <= opted_in
    assert not {"desktop_shell", "desktop_file"} & without
    assert opted_in - without == {"desktop_shell", "desktop_file"}


def test_listing_the_apps_changes_nothing_and_says_so() -> None:
    registry = ActionRegistry(DESKTOP_ACTIONS + A11Y_ACTIONS + DESKTOP_APP_ACTIONS)
    write = {t.name: t for t in tools.tools_for(registry, "write", SHELL)}
    apps = write["desktop_apps"].annotations
    assert apps is not None and apps.read_only_hint
    launch = write["desktop_launch"].annotations
    assert not (launch and launch.read_only_hint)
    assert "desktop_apps" not in {t.name for t in tools.tools_for(registry, "read", SHELL)}


def test_a_new_action_is_a_new_tool() -> None:
    registry = _registry()
    registry.register(Action("desktop_new", "read", tool_schema({}), "new", _noop))
    assert "desktop_new" in {t.name for t in tools.tools_for(registry, "read", SHELL)}


def test_the_conversation_is_the_endpoints() -> None:
    assert tools.bound_arguments({"slot": "main"}, "c1") == {
        "slot": "main",
        "conversation_id": "c1",
    }
    assert tools.bound_arguments(None, "c1") == {"conversation_id": "c1"}
    assert tools.bound_arguments({"conversation_id": "c1"}, "c1") == {"conversation_id": "c1"}
    with pytest.raises(InvalidArgs) as caught:
        tools.bound_arguments({"conversation_id": "other"}, "c1")
    assert caught.value.details["field"] == "conversation_id"


def test_an_answer_is_json_text() -> None:
    result = tools.tool_result(200, {"ok": True, "desktops": [], "probes": {}})
    assert not result.is_error and len(result.content) == 1
    assert _text(result) == {"ok": True, "desktops": [], "probes": {}}


def test_a_picture_is_image_content_and_leaves_the_text() -> None:
    answer = {
        "ok": True,
        "width": 1280,
        "height": 800,
        "format": "png",
        "image": PNG,
        "screen_revision": "sr1.x",
        "source": "vision",
    }
    result = tools.tool_result(200, answer)
    text, image = result.content
    assert isinstance(image, types.ImageContent)
    assert (image.data, image.mime_type) == (PNG, "image/png")
    assert _text(result) == {k: v for k, v in answer.items() if k != "image"}
    assert isinstance(text, types.TextContent) and PNG not in text.text


def test_a_preview_is_a_second_image() -> None:
    answer = {
        "ok": True,
        "format": "jpeg",
        "image": PNG,
        "width": 1280,
        "height": 800,
        "preview": {"width": 320, "height": 200, "image": SMALL},
    }
    result = tools.tool_result(200, answer)
    _, full, preview = result.content
    assert isinstance(full, types.ImageContent) and isinstance(preview, types.ImageContent)
    assert (full.data, preview.data, preview.mime_type) == (PNG, SMALL, "image/jpeg")
    assert _text(result)["preview"] == {"width": 320, "height": 200}


@pytest.mark.parametrize(
    "answer",
    [
        {"ok": True, "image": PNG},  # no format: not a picture this endpoint knows
        {"ok": True, "image": PNG, "format": "tiff"},
        {"ok": True, "image": 5, "format": "png"},
    ],
)
def test_only_known_pictures_become_images(answer: dict[str, Any]) -> None:
    result = tools.tool_result(200, answer)
    assert len(result.content) == 1 and _text(result) == answer


def test_an_error_answer_is_a_tool_error_with_the_one_error_body() -> None:
    body = {
        "ok": False,
        "error": {"code": "stale_ref", "message": "gone", "suggestion": "observe again"},
    }
    result = tools.tool_result(409, body)
    assert result.is_error and _text(result) == body


def test_refused_arguments_name_the_field() -> None:
    result = tools.refused(InvalidArgs("conversation_id", "not here"))
    assert result.is_error
    assert _text(result)["error"]["field"] == "conversation_id"
