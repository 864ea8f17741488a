"""The helper's local desktop against real processes: auth, lifecycle, connect, races."""

from __future__ import annotations

import asyncio
import logging
import random
import signal
from typing import Any
from urllib.parse import quote

import aiohttp
import pytest

from host_helper.desktop import SHARING_DISABLED
from tests.host_helper.conftest import (
    TOKEN,
    Helper,
    helper_config,
    running_helper,
    x11vnc_on,
)
from tests.support.processes import scaled
from tests.support.stack import wait_until
from tests.support.xvfb import XvfbServer

pytestmark = pytest.mark.integration


async def banner_through_connect(helper: Helper, port: int) -> bytes:
    url = f"{helper.url}/v1/local/connect?port={port}"
    async with helper.http.ws_connect(url, headers=helper.headers) as ws:
        message = await asyncio.wait_for(ws.receive(), scaled(5))
        assert message.type == aiohttp.WSMsgType.BINARY, message
        return bytes(message.data)


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"}],
    ids=["missing", "wrong", "wrong-scheme"],
)
async def test_requests_without_the_token_are_refused_and_logged_without_it(
    helper: Helper, headers: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    calls = [
        ("POST", "/v1/local/start"),
        ("GET", "/v1/local/status"),
        ("GET", "/v1/local/connect?port=1"),
        ("POST", "/v1/screen/click"),
    ]
    for method, path in calls:
        async with helper.http.request(method, f"{helper.url}{path}", headers=headers) as resp:
            assert resp.status == 401
            assert (await resp.json())["error"]["code"] == "unauthorized"
    assert helper.desktops.spawned == 0
    assert "refused" in caplog.text
    assert TOKEN not in caplog.text
    assert "wrong" not in caplog.text


async def test_start_serves_rfb_through_the_connect_stream(helper: Helper) -> None:
    started = await helper.start()
    assert started["already_running"] is False
    assert len(started["local_screen_session_id"]) == 32  # 128 random bits, hex
    assert started["display"] == helper.display
    port = started["websockify_port"]
    assert (await banner_through_connect(helper, port)).startswith(b"RFB 003.")
    # Closing a viewer closes its transport, never the desktop.
    status, body = await helper.call("GET", "/v1/local/status")
    assert status == 200 and body["running"] is True
    assert body["desktop"]["local_screen_session_id"] == started["local_screen_session_id"]
    again = await helper.start()
    assert again["already_running"] is True
    assert again["local_screen_session_id"] == started["local_screen_session_id"]
    assert len(x11vnc_on(helper.display)) == 1 and helper.desktops.spawned == 1


async def test_connect_to_another_port_is_refused(helper: Helper) -> None:
    status, body = await helper.call("GET", "/v1/local/connect?port=22")
    assert (status, body["error"]["code"]) == (409, "not_running")
    started = await helper.start()
    port = started["websockify_port"]
    current = helper.desktops.current
    assert current is not None
    for other in (22, port + 1, port - 1, current.vnc_port):
        status, body = await helper.call("GET", f"/v1/local/connect?port={other}")
        assert (status, body["error"]["code"]) == (403, "forbidden"), other
    # non-numbers, out-of-range numbers, this very port in full-width digits, a NUL after it
    full_width = quote("".join(chr(0xFF10 + int(digit)) for digit in str(port)))
    for raw in ("abc", "0", "65536", "-1", "", full_width, f"{port}%00"):
        status, body = await helper.call("GET", f"/v1/local/connect?port={raw}")
        assert (status, body["error"]["code"]) == (400, "invalid_args"), raw


async def test_the_port_of_an_earlier_desktop_is_refused_and_open_streams_end_with_it(
    helper: Helper,
) -> None:
    first = await helper.start()
    url = f"{helper.url}/v1/local/connect?port={first['websockify_port']}"
    async with helper.http.ws_connect(url, headers=helper.headers) as stream:
        assert (
            await asyncio.wait_for(stream.receive(), scaled(5))
        ).type == aiohttp.WSMsgType.BINARY
        await helper.stop(first["local_screen_session_id"])
        # The viewer stream closes with its desktop, never left frozen.
        ending = await asyncio.wait_for(stream.receive(), scaled(5))
        assert ending.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED), ending
    second = await helper.start()
    while second["websockify_port"] == first["websockify_port"]:  # the kernel reused the port
        await helper.stop(second["local_screen_session_id"])
        second = await helper.start()
    status, body = await helper.call("GET", f"/v1/local/connect?port={first['websockify_port']}")
    assert (status, body["error"]["code"]) == (403, "forbidden")
    assert (await banner_through_connect(helper, second["websockify_port"])).startswith(b"RFB")


async def test_stale_stop_conflicts_and_the_desktop_keeps_running(helper: Helper) -> None:
    first = (await helper.start())["local_screen_session_id"]
    assert (await helper.stop(first))["stopped"] is True
    assert await helper.stop(first) == {"ok": True, "stopped": False, "was_running": False}
    second = (await helper.start())["local_screen_session_id"]
    stale = await helper.stop(first)
    assert stale == {"ok": True, "stopped": False, "conflict": True, "current_session_id": second}
    status, body = await helper.call("GET", "/v1/local/status")
    assert body["running"] is True and body["desktop"]["local_screen_session_id"] == second
    port = body["desktop"]["websockify_port"]
    assert (await banner_through_connect(helper, port)).startswith(b"RFB 003.")
    status, body = await helper.call("POST", "/v1/local/stop", {})
    assert (status, body["error"]["code"]) == (400, "invalid_args")


async def test_racing_starts_and_stops_never_run_two_x11vnc(helper: Helper) -> None:
    most_seen = 0
    stopped: list[str] = []
    done = asyncio.Event()

    async def watch() -> None:
        nonlocal most_seen
        while not done.is_set():
            most_seen = max(most_seen, len(await asyncio.to_thread(x11vnc_on, helper.display)))
            await asyncio.sleep(0.01)

    async def pair() -> tuple[str, dict[str, Any]]:
        session = (await helper.start())["local_screen_session_id"]
        await asyncio.sleep(random.uniform(0, 0.05))
        return session, await helper.stop(session)

    watcher = asyncio.create_task(watch())
    try:
        results = await asyncio.gather(*(pair() for _ in range(20)))
    finally:
        done.set()
        await watcher
    assert most_seen <= 1
    for session, result in results:
        if result["stopped"]:
            stopped.append(session)
        elif result.get("conflict"):
            assert result["current_session_id"] != session  # a newer one: left running
        else:
            assert result == {"ok": True, "stopped": False, "was_running": False}
    assert len(stopped) == len(set(stopped))  # each incarnation stopped at most once
    assert helper.desktops.spawned >= len(stopped)


async def test_sharing_disabled_refuses_every_start(host_screen: XvfbServer) -> None:
    config = helper_config(host_screen.display, allow_remote_desktop=False)
    async with running_helper(config) as helper:
        status, body = await helper.call("POST", "/v1/local/start", {})
        assert (status, body["error"]["code"]) == (403, "forbidden")
        assert body["error"]["message"] == SHARING_DISABLED
        assert helper.desktops.spawned == 0


async def test_a_display_that_does_not_exist_is_a_clear_error() -> None:
    async with running_helper(helper_config(":9876")) as helper:
        status, body = await helper.call("POST", "/v1/local/start", {})
        assert (status, body["error"]["code"]) == (503, "unavailable")
        assert "display :9876 does not exist" in body["error"]["message"]
        assert helper.desktops.spawned == 0
    async with running_helper(helper_config("")) as helper:
        status, body = await helper.call("POST", "/v1/local/start", {})
        assert status == 503 and "set DISPLAY or --display" in body["error"]["message"]


async def test_watchdog_cleans_up_and_reports_the_reason(helper: Helper) -> None:
    started = await helper.start()
    x11vnc = x11vnc_on(helper.display)
    assert len(x11vnc) == 1
    x11vnc[0].send_signal(signal.SIGTERM)  # SIGTERM: x11vnc frees its shared memory

    async def failure_reported() -> bool:
        body = (await helper.call("GET", "/v1/local/status"))[1]
        return body["running"] is False and body["last_failure"] is not None

    await wait_until(failure_reported, 10, "the failure in status")
    body = (await helper.call("GET", "/v1/local/status"))[1]
    failure = body["last_failure"]
    assert failure["local_screen_session_id"] == started["local_screen_session_id"]
    assert "x11vnc" in failure["reason"] or "rfb" in failure["reason"]
    assert not x11vnc_on(helper.display)


async def test_check_fails_a_desktop_whose_websockify_died(helper: Helper) -> None:
    await helper.start()
    current = helper.desktops.current
    assert current is not None
    websockify = current.children.children[0]
    websockify.terminate()
    await wait_until(lambda: not websockify.is_alive(), 5, "websockify to exit")
    await helper.desktops.check()
    assert helper.desktops.current is None
    assert helper.desktops.last_failure is not None
    assert "websockify" in helper.desktops.last_failure["reason"]
    assert not x11vnc_on(helper.display)
