"""The direct viewing path: a relay beside the server, registered as co-located.

The relay runs with ``RELAYDESK_DIRECT_VNC_HOST`` (as ``relaydesk up`` starts it) and the
operator registered it as co-located, so the server connects to x11vnc on loopback itself,
after authenticating with the desktop's VNC secret: same viewer URL, same capability checks,
no relay channel. Without the registration the same relay is served through its channel.
Real server, relay, Xvfb and x11vnc.
"""

from __future__ import annotations

import asyncio
import base64
import os
import time
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import numpy as np
import pytest
import pytest_asyncio

from relay.config import DIRECT_HOST_ENV
from server.relays.capabilities import DIRECT_VNC
from server.viewer.backends import DirectBackend
from tests.e2e.viewer_stack import (
    Desktop,
    ViewerStack,
    capture,
    viewer_stack,
    without_cursor,
)
from tests.integration.test_viewer_tunnel import (
    close_of,
    full_frame,
    open_viewer,
    open_viewers,
    send_garbage,
    settled,
    stop_and_watch,
    until_closed,
    vnc_connections,
)
from tests.support.processes import scaled
from tests.support.stack import wait_until
from wire.errors import ChannelClosedError, CloseCode, ErrorCode, OpError

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ViewerStack]:
    env = {DIRECT_HOST_ENV: "127.0.0.1"}
    workdir = tmp_path_factory.mktemp("viewer-direct")
    async with viewer_stack(workdir, env, co_located=True) as stack:
        yield stack


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def desktop(stack: ViewerStack) -> Desktop:
    return await stack.start_desktop(paint=True)


def server_vnc_connections(desktop: Desktop) -> int:
    """This process's (the server's) TCP connections to the desktop's x11vnc."""
    return vnc_connections(os.getpid(), desktop)


async def test_the_relay_offers_its_port_and_secret_never_a_host(
    stack: ViewerStack, desktop: Desktop
) -> None:
    assert DIRECT_VNC in stack.relays.capabilities(stack.relay_id)
    status = await stack.relays.request(stack.relay_id, "desktop.status", {}, 10)
    sid = desktop.desktop_session_id
    row = next(r for r in status["desktops"] if r["desktop_session_id"] == sid)
    assert "direct" not in row  # status rows carry no address and no secret
    direct = await stack.relays.request(stack.relay_id, "vnc.direct", {"desktop_session_id": sid})
    assert set(direct) == {"port", "secret"}
    assert direct["port"] == desktop.vnc_port
    # What the server asks when a direct stream ends (answered without the lifecycle lock).
    holds = await stack.relays.request(stack.relay_id, "desktop.holds", {"desktop_session_id": sid})
    assert holds == {"holds": True}
    other = {"desktop_session_id": "f" * 32}
    assert await stack.relays.request(stack.relay_id, "desktop.holds", other) == {"holds": False}
    with pytest.raises(OpError) as refused:
        await stack.relays.request(stack.relay_id, "desktop.holds", {})
    assert refused.value.code is ErrorCode.INVALID_ARGS


async def test_a_direct_viewer_sees_the_screen_without_a_relay_channel(
    stack: ViewerStack, desktop: Desktop
) -> None:
    opens = stack.channel_opens()
    async with open_viewer(stack.socket_url(desktop)) as client:
        assert (client.width, client.height) == (1280, 800)
        assert server_vnc_connections(desktop) == 1, "the server did not connect to x11vnc itself"
        frame = await full_frame(client)
        expected = await asyncio.to_thread(capture, desktop.display)
    frame, expected = (without_cursor(image, desktop.display) for image in (frame, expected))
    assert np.array_equal(frame, expected), "the framebuffer differs from the Xvfb capture"
    assert stack.channel_opens() == opens, "a direct viewer opened a relay channel"
    assert stack.server_channels() == 0
    await wait_until(lambda: settled(stack), 5, "the viewer to be released")
    await wait_until(lambda: server_vnc_connections(desktop) == 0, 5, "x11vnc connection closed")


async def test_a_direct_viewer_open_costs_the_relay_no_status_call(
    stack: ViewerStack, desktop: Desktop
) -> None:
    """Counted at the relay, in its op log: opening direct viewers asks ``vnc.direct`` at most
    once for the session, and never ``desktop.status``."""
    status, direct = stack.relay_ops("desktop.status"), stack.relay_ops("vnc.direct")
    for _ in range(3):
        async with open_viewer(stack.socket_url(desktop)) as client:
            assert (client.width, client.height) == (1280, 800)
        await wait_until(lambda: settled(stack), 5, "the viewer to be released")
    assert stack.relay_ops("desktop.status") == status, "a direct viewer cost a status call"
    assert stack.relay_ops("vnc.direct") - direct <= 1
    assert stack.channel_opens() == 0


async def test_refused_direct_viewers_never_reach_x11vnc(
    stack: ViewerStack, desktop: Desktop
) -> None:
    good = stack.token(desktop.desktop_session_id)
    forged = good[:-4] + ("AAAA" if not good.endswith("AAAA") else "BBBB")
    code, _ = await close_of(stack.socket_url(desktop, forged))
    assert code == CloseCode.VIEWER_FORBIDDEN
    expired = stack.token(desktop.desktop_session_id, ttl_s=-5)
    code, _ = await close_of(stack.socket_url(desktop, expired))
    assert code == CloseCode.VIEWER_EXPIRED
    assert server_vnc_connections(desktop) == 0
    assert settled(stack)


async def test_the_direct_path_splices_nothing_to_a_port_that_does_not_authenticate(
    stack: ViewerStack, desktop: Desktop
) -> None:
    direct = await stack.relays.request(
        stack.relay_id, "vnc.direct", {"desktop_session_id": desktop.desktop_session_id}
    )
    secret = base64.b64decode(direct["secret"])
    server_port = urlsplit(stack.url).port
    assert server_port is not None
    # The server's own HTTP port (no RFB banner), and x11vnc with a wrong secret.
    for port, key in ((server_port, secret), (desktop.vnc_port, bytes(8))):
        with pytest.raises(ChannelClosedError):
            await DirectBackend.connect(port, key)
    backend = await DirectBackend.connect(desktop.vnc_port, secret)
    assert bytes(await backend.read()).startswith(b"RFB 003.008\n")  # our handshake to the viewer
    await backend.close()
    await wait_until(lambda: server_vnc_connections(desktop) == 0, 5, "x11vnc connection closed")


async def test_garbage_on_a_direct_stream_closes_it_cleanly(
    stack: ViewerStack, desktop: Desktop
) -> None:
    tasks_before = len(asyncio.all_tasks())
    banner, code, reason = await send_garbage(stack.socket_url(desktop))
    assert banner.startswith(b"RFB 003.008")
    # x11vnc hangs up on the bad handshake; its desktop still runs.
    assert code == CloseCode.NORMAL, (code, reason)
    assert "VNC server ended the stream" in reason
    await wait_until(lambda: settled(stack), 5, "the viewer to be released")
    await wait_until(lambda: server_vnc_connections(desktop) == 0, 5, "x11vnc connection closed")
    await wait_until(lambda: len(asyncio.all_tasks()) <= tasks_before, 5, "tasks to finish")


async def test_a_lost_relay_closes_direct_viewers_and_its_return_admits_them(
    stack: ViewerStack, desktop: Desktop
) -> None:
    # x11vnc outlives a killed relay, but a desktop whose relay is gone is not viewable: the
    # inventory marks it unknown and the direct stream is closed like a tunnelled one.
    async with open_viewer(stack.socket_url(desktop)) as client:
        ws = client.t._ws  # type: ignore[attr-defined]
        started = time.perf_counter()
        stack.relay.kill()
        await until_closed(ws, 5)
        assert ws.close_code == CloseCode.RELAY_UNREACHABLE
        assert time.perf_counter() - started < scaled(2)
    code, _ = await close_of(stack.socket_url(desktop))
    assert code == CloseCode.RELAY_UNREACHABLE, "a viewer was admitted while the relay was gone"
    await wait_until(lambda: server_vnc_connections(desktop) == 0, 5, "x11vnc connection closed")

    stack.start_relay()
    directory = stack.app.state.parts.viewer.directory

    async def running_again() -> bool:
        row = await directory.row(stack.relay_id, desktop.desktop_session_id)
        return row is not None and row.state == "running"

    await wait_until(running_again, 20, "the relay to return with the desktop")
    # The relay adopted the running desktop: the same viewer URL works again, directly.
    async with open_viewer(stack.socket_url(desktop)) as client:
        assert server_vnc_connections(desktop) == 1
        assert (await full_frame(client)).shape == (800, 1280, 3)
    await wait_until(lambda: settled(stack), 5, "the viewer to be released")


async def test_stopping_the_desktop_closes_direct_viewers(
    stack: ViewerStack, desktop: Desktop
) -> None:
    async with open_viewers(stack.socket_url(desktop), 3) as clients:
        assert stack.viewers(desktop.desktop_session_id) == 3
        codes, last_close_s = await stop_and_watch(stack, desktop, clients)
    assert all(code == CloseCode.DESKTOP_STOPPED for code in codes), codes
    assert last_close_s < scaled(2)
    await wait_until(lambda: settled(stack), 5, "all viewers to be released")
    assert server_vnc_connections(desktop) == 0
    # The stopped session's token opens nothing, on either path.
    code, _ = await close_of(stack.socket_url(desktop))
    assert code == CloseCode.DESKTOP_STOPPED
