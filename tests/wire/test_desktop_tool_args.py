"""The desktop tools' own argument checks (``wire.desktop_tool_args``), shared by the server's
actions and the relay: each refusal names its field."""

from __future__ import annotations

from typing import Any

import pytest

from wire import desktop_tool_args as tool_args
from wire.desktop_tool_args import CLIPBOARD_MAX
from wire.errors import InvalidArgs

pytestmark = pytest.mark.unit


def _field(check: Any, args: dict[str, Any]) -> str:
    with pytest.raises(InvalidArgs) as info:
        check(args)
    field: str = info.value.details["field"]
    return field


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ({"window_id": 1, "op": "move", "x": 1}, "y"),
        ({"window_id": 1, "op": "resize", "height": 3}, "width"),
        ({"window_id": 1, "op": "resize", "width": 0, "height": 3}, "width"),
        ({"window_id": 1, "op": "move", "x": 1, "y": 40_000}, "y"),
        ({"window_id": 1, "op": "close", "width": 5}, "width"),
        ({"window_id": 0, "op": "close"}, "window_id"),
        ({"window_id": 2**32, "op": "close"}, "window_id"),
    ],
)
def test_window_args(args: dict[str, Any], field: str) -> None:
    assert _field(tool_args.check_window_args, args) == field


def test_good_window_args_pass() -> None:
    tool_args.check_window_args({"window_id": 7, "op": "move", "x": -20, "y": 5})
    tool_args.check_window_args({"window_id": 7, "op": "resize", "width": 10, "height": 10})
    tool_args.check_window_args({"window_id": 7, "op": "activate"})


@pytest.mark.parametrize(
    ("check", "args", "field"),
    [
        (tool_args.check_clipboard_args, {"op": "set"}, "text"),
        (tool_args.check_clipboard_args, {"op": "get", "text": "x"}, "text"),
        (tool_args.check_clipboard_args, {"op": "set", "text": "x" * (CLIPBOARD_MAX + 1)}, "text"),
        (tool_args.check_shell_args, {"command": ""}, "command"),
        (tool_args.check_shell_args, {"command": "a\x00b"}, "command"),
        (tool_args.check_shell_args, {"command": "true", "timeout_s": 0}, "timeout_s"),
        (tool_args.check_file_args, {"op": "write_bytes", "path": "p"}, "content"),
        (tool_args.check_file_args, {"op": "exists", "path": "p", "offset": 1}, "offset"),
        (tool_args.check_file_args, {"op": "read_bytes", "path": "p", "length": 0}, "length"),
        (tool_args.check_file_args, {"op": "read_text", "path": "a\x00"}, "path"),
        (tool_args.check_file_args, {"op": "read_text", "path": ""}, "path"),
    ],
)
def test_tool_args(check: Any, args: dict[str, Any], field: str) -> None:
    assert _field(check, args) == field


def test_every_window_and_file_op_has_its_fields() -> None:
    assert set(tool_args.WINDOW_OP_FIELDS) == set(tool_args.WINDOW_OPS)
    fields = set(tool_args.FILE_OP_FIELDS) | set(tool_args.FILE_OP_OPTIONAL)
    assert fields <= set(tool_args.FILE_OPS)
