"""The relay's host-helper client (relay/local_desktop.py) and the CLI's refusals."""

from __future__ import annotations

import asyncio
import subprocess
from typing import Any, cast

import pytest
from Xlib import display as xdisplay

from relay.handlers import Handlers
from relay.local_desktop import HostHelperClient, LocalDesktop
from tests.host_helper.conftest import TOKEN, Helper, x11vnc_on
from tests.support.processes import free_port, scaled
from tests.support.stack import relaydesk_argv, wait_until
from wire.errors import ErrorCode, OpError
from wire.ids import RequestId
from wire.messages import Request
from wire.ops import RevisionTarget, ScreenSizeResult

pytestmark = pytest.mark.integration


def run_helper_cli(**env: str) -> subprocess.CompletedProcess[str]:
    """``relaydesk host-helper`` with only ``env`` (and a PATH), expected to refuse at once."""
    return subprocess.run(
        relaydesk_argv("host-helper", "--port", str(free_port())),
        env={"PATH": "/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        timeout=scaled(30),
        check=False,
    )


def test_the_helper_refuses_to_start_without_a_token() -> None:
    done = run_helper_cli(RELAYDESK_HOST_HELPER_TOKEN=" ")
    assert done.returncode == 2
    assert "RELAYDESK_HOST_HELPER_TOKEN is required" in done.stderr


def test_the_helper_refuses_an_unknown_input_backend() -> None:
    done = run_helper_cli(RELAYDESK_HOST_HELPER_TOKEN="t", RELAYDESK_INPUT_BACKEND="telepathy")
    assert done.returncode == 2
    assert "unknown input backend 'telepathy' (known: xtest, pyautogui)" in done.stderr
    assert "Traceback" not in done.stderr


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
        handlers = Handlers([local])
        shot = cast(ScreenSizeResult, await handlers.screen("screen_size", {"kind": "local"}))
        assert (shot["width"], shot["desktop_session_id"]) == (800, row["desktop_session_id"])
        target: RevisionTarget = {"desktop_session_id": "f" * 32, "display": None}
        with pytest.raises(OpError) as mismatch:
            await handlers.screen(
                "click", {"kind": "local", "x": 1, "y": 1, "revision_target": target}
            )
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


async def test_concurrent_starts_from_two_relay_connections_make_one_desktop(
    helper: Helper,
) -> None:
    # Two relay processes pointed at one helper: separate clients, separate connections.
    relays = [LocalDesktop(HostHelperClient(helper.url, TOKEN)) for _ in range(2)]
    try:
        rows = await asyncio.gather(
            *(
                relay.start({"kind": "local", "started_by": f"relay-{index % 2}"})
                for index, relay in enumerate(relays * 5)
            )
        )
        assert len({row["desktop_session_id"] for row in rows}) == 1
        assert [row["already_running"] for row in rows].count(False) == 1
        assert helper.desktops.spawned == 1
        assert len(await asyncio.to_thread(x11vnc_on, helper.display)) == 1
        # Both relays report the same one row.
        seen = [await relay.rows() for relay in relays]
        assert seen[0] == seen[1] and len(seen[0]) == 1
    finally:
        for relay in relays:
            await relay.aclose()


async def test_the_relay_client_cannot_reach_another_port(helper: Helper) -> None:
    client = HostHelperClient(helper.url, TOKEN)
    try:
        row = await LocalDesktop(client).start({"kind": "local"})
        current = helper.desktops.current
        assert current is not None
        for port in (current.vnc_port, row["websockify_port"] + 1, 22):
            with pytest.raises(OpError) as refused:
                await client.connect(port)
            assert refused.value.code is ErrorCode.UNAVAILABLE
            assert "refused the stream (HTTP 403)" in refused.value.message
        stream = await client.connect(row["websockify_port"])
        message = await asyncio.wait_for(stream.receive(), scaled(5))
        assert bytes(message.data).startswith(b"RFB 003.")
        await stream.close()
    finally:
        await client.aclose()


def host_num_lock(display: str) -> bool:
    conn = xdisplay.Display(display)
    try:
        return bool(int(conn.get_keyboard_control().led_mask) & 0x2)
    finally:
        conn.close()


async def test_keyboard_state_of_a_local_session_reads_the_host_display(helper: Helper) -> None:
    local = LocalDesktop(HostHelperClient(helper.url, TOKEN))
    handlers = Handlers([local])

    async def keyboard_state(session_id: str) -> Any:
        request = Request(RequestId("r1"), "keyboard.state", {"desktop_session_id": session_id})
        return await handlers.dispatch(cast(Any, None), request)

    async def num_lock_is(on: bool) -> bool:
        return bool(await asyncio.to_thread(host_num_lock, helper.display) is on)

    try:
        session = (await local.start({"kind": "local"}))["desktop_session_id"]
        before = await asyncio.to_thread(host_num_lock, helper.display)
        state = await keyboard_state(session)
        assert state == {
            "num_lock": before,
            "caps_lock": False,
            "scroll_lock": False,
            "source": "led_mask",
        }
        for flipped in (not before, before):
            await handlers.screen("key", {"kind": "local", "keys": "Num_Lock"})
            await wait_until(lambda f=flipped: num_lock_is(f), 5, f"the NumLock LED {flipped}")
            assert (await keyboard_state(session))["num_lock"] is flipped

        with pytest.raises(OpError) as unknown:
            await keyboard_state("f" * 32)
        assert unknown.value.code is ErrorCode.NOT_RUNNING
        # A row the helper cannot confirm is never read (nor guessed).
        row = (await local.rows())[0] | {"state": "unknown"}
        with pytest.raises(OpError) as unconfirmed:
            await local.keyboard_state(row)
        assert unconfirmed.value.code is ErrorCode.UNAVAILABLE
        await helper.stop(session)
        with pytest.raises(OpError) as stopped:
            await keyboard_state(session)
        assert stopped.value.code is ErrorCode.NOT_RUNNING
    finally:
        await local.aclose()
        await handlers.aclose()
