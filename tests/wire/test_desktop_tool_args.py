"""The desktop tools' own argument checks (``wire.ops.check_*``), shared by the server's
actions and the relay: each refusal names its field."""

from __future__ import annotations

from typing import Any

import pytest

from wire import ops
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
    assert _field(ops.check_window_args, args) == field


def test_good_window_args_pass() -> None:
    ops.check_window_args({"window_id": 7, "op": "move", "x": -20, "y": 5})
    ops.check_window_args({"window_id": 7, "op": "resize", "width": 10, "height": 10})
    ops.check_window_args({"window_id": 7, "op": "activate"})


@pytest.mark.parametrize(
    ("check", "args", "field"),
    [
        (ops.check_clipboard_args, {"op": "set"}, "text"),
        (ops.check_clipboard_args, {"op": "get", "text": "x"}, "text"),
        (ops.check_clipboard_args, {"op": "set", "text": "x" * (ops.CLIPBOARD_MAX + 1)}, "text"),
        (ops.check_shell_args, {"command": ""}, "command"),
        (ops.check_shell_args, {"command": "a\x00b"}, "command"),
        (ops.check_shell_args, {"command": "true", "timeout_s": 0}, "timeout_s"),
        (ops.check_file_args, {"op": "write_bytes", "path": "p"}, "content"),
        (ops.check_file_args, {"op": "exists", "path": "p", "offset": 1}, "offset"),
        (ops.check_file_args, {"op": "read_bytes", "path": "p", "length": 0}, "length"),
        (ops.check_file_args, {"op": "read_text", "path": "a\x00"}, "path"),
        (ops.check_file_args, {"op": "read_text", "path": ""}, "path"),
    ],
)
def test_tool_args(check: Any, args: dict[str, Any], field: str) -> None:
    assert _field(check, args) == field


def test_every_window_and_file_op_has_its_fields() -> None:
    assert set(ops.WINDOW_OP_FIELDS) == set(ops.WINDOW_OPS)
    assert set(ops.FILE_OP_FIELDS) | set(ops.FILE_OP_OPTIONAL) <= set(ops.FILE_OPS)
