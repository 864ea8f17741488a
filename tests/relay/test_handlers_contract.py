"""The relay checks every request against the op's typed contract (wire/ops.py) before any
handler runs: a missing, unknown or mistyped field is ``invalid_args`` naming that field."""

from __future__ import annotations

from pathlib import Path

import pytest

from relay.handlers import Handlers
from wire.errors import ErrorCode, OpError
from wire.ids import RequestId
from wire.messages import Request

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("args", "field", "problem"),
    [
        ({"kind": "virtual", "slot": "main"}, "desktop_session_id", "required"),
        ({"desktop_session_id": "s-1", "sesion": "x"}, "sesion", "unknown argument"),
        ({"desktop_session_id": 7}, "desktop_session_id", "must be"),
    ],
    ids=["missing", "unknown", "wrong-type"],
)
async def test_a_request_off_the_contract_is_invalid_args_naming_the_field(
    args: dict[str, object], field: str, problem: str, tmp_path: Path
) -> None:
    handlers = Handlers()
    request = Request(RequestId("r-1"), "desktop.stop", args, 1000)
    with pytest.raises(OpError) as info:
        await handlers.dispatch(None, request)  # type: ignore[arg-type]
    assert info.value.code is ErrorCode.INVALID_ARGS
    assert info.value.details == {"field": field}
    assert info.value.message.startswith(f"{field}: {problem}")


@pytest.mark.parametrize(
    ("action", "args", "field"),
    [
        ("click", {"x": 1, "y": 2, "text": "hello"}, "text"),
        ("type", {"text": "hello", "x": 1}, "x"),
        ("screenshot", {"region": {"x": 0, "y": 0, "width": 1, "height": 1}}, "region"),
        ("move", {"x": 1, "y": 2, "guard": {}}, "guard"),
        ("screen_size", {"keys": "a"}, "keys"),
    ],
)
async def test_a_screen_action_takes_only_its_own_fields(
    action: str, args: dict[str, object], field: str
) -> None:
    # Refused before any desktop is looked for: the field belongs to another action.
    request = Request(RequestId("r-1"), f"screen.{action}", args, 1000)
    with pytest.raises(OpError) as info:
        await Handlers().dispatch(None, request)  # type: ignore[arg-type]
    assert info.value.code is ErrorCode.INVALID_ARGS
    assert info.value.details == {"field": field}
    assert info.value.message.startswith(f"{field}: unknown argument")
