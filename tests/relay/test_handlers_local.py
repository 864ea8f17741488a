"""A relay without a host helper says how to share its real screen instead of failing."""

from __future__ import annotations

from pathlib import Path

import pytest

from relay.handlers import Handlers
from wire.errors import ErrorCode, OpError
from wire.ids import RequestId
from wire.messages import Request

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("op", "args"),
    [("screen.screenshot", {"kind": "local"}), ("desktop.start", {"kind": "local"})],
)
async def test_the_local_screen_without_a_host_helper_names_the_next_step(
    op: str, args: dict[str, object], tmp_path: Path
) -> None:
    handlers = Handlers()
    with pytest.raises(OpError) as info:
        await handlers.dispatch(None, Request(RequestId(1), op, args, 1000))  # type: ignore[arg-type]
    assert info.value.code is ErrorCode.UNAVAILABLE
    assert "does not share its host's real screen" in info.value.message
    assert "run `relaydesk host-helper`" in info.value.message
