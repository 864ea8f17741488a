"""The relay's host-helper client (relay/local_desktop.py) and the CLI's refusals."""

from __future__ import annotations

import asyncio
import subprocess
from typing import Any

import pytest

from relay.local_desktop import HostHelperClient, LocalDesktop
from tests.host_helper.conftest import TOKEN, Helper
from tests.support.processes import free_port, scaled
from tests.support.stack import relaydesk_argv
from wire.errors import ErrorCode, OpError

pytestmark = pytest.mark.integration


def test_the_helper_refuses_to_start_without_a_token() -> None:
    env = {"PATH": "/usr/bin:/bin", "RELAYDESK_HOST_HELPER_TOKEN": " "}
    done = subprocess.run(
        relaydesk_argv("host-helper", "--port", str(free_port())),
        env=env, capture_output=True, text=True, timeout=scaled(30), check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "RELAYDESK_HOST_HELPER_TOKEN is required" in done.stderr


async def test_wrong_token_and_unreachable_helper_are_clear_errors(helper: Helper) -> None:
    wrong = HostHelperClient(helper.url, "not-the-token")
    gone = HostHelperClient(f"http://127.0.0.1:{free_port()}", TOKEN)
    try:
        with pytest.raises(OpError) as refused:
            await wrong.call("GET", "/v1/local/status")
        assert refused.value.code is ErrorCode.UNAVAILABLE
        assert "refused this relay's token" in refused.value.message
        with pytest.raises(OpError) as unreachable:
            await LocalDesktop(gone).start({"kind": "local"})
        assert unreachable.value.code is ErrorCode.UNAVAILABLE
        assert "does not answer" in unreachable.value.message
        assert await LocalDesktop(gone).rows() == []
    finally:
        await wrong.aclose()
        await gone.aclose()


async def test_local_desktop_ops_and_the_poll_report(helper: Helper) -> None:
    events: list[dict[str, Any]] = []

    async def on_change(row: dict[str, Any]) -> None:
        events.append(row)

    local = LocalDesktop(HostHelperClient(helper.url, TOKEN), on_change)
    try:
        with pytest.raises(OpError) as bad_slot:
            await local.start({"kind": "local", "slot": "other"})
        assert bad_slot.value.code is ErrorCode.INVALID_ARGS
        row = await local.start({"kind": "local", "started_by": "alice"})
        assert (row["kind"], row["started_by"], row["state"]) == ("local", "alice", "running")
        shot = await local.screen({"action": "screen_size", "args": {}})
        assert (shot["width"], shot["desktop_session_id"]) == (800, row["desktop_session_id"])
        with pytest.raises(OpError) as mismatch:
            await local.screen({"action": "click", "args": {
                "x": 1, "y": 1, "revision_target": {"desktop_session_id": "f" * 32}}})  # fmt: skip
        assert mismatch.value.code is ErrorCode.REVISION_MISMATCH

        # stopped behind the relay's back (e.g. on the host): the poll reports it once
        await helper.stop(row["desktop_session_id"])
        await local.check()
        await local.check()
        assert [(e["desktop_session_id"], e["state"]) for e in events] == [
            (row["desktop_session_id"], "stopped")
        ]
        assert await asyncio.wait_for(local.rows(), scaled(5)) == []
    finally:
        await local.aclose()
