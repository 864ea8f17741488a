"""The viewer tunnel against a real relay and desktop: RFB through the server, refusals, limits."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator

import aiohttp
import numpy as np
import psutil
import pytest
import pytest_asyncio

from benchmarks.rfb import RFBClient, RFBError, WebSocketTransport
from server.relays.channel import MAX_WINDOW
from tests.e2e.viewer_stack import (
    Desktop,
    ViewerStack,
    capture,
    viewer_stack,
    without_cursor,
)
from tests.support.processes import scaled
from tests.support.stack import wait_until
from wire.errors import CloseCode

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ViewerStack]:
    async with viewer_stack(tmp_path_factory.mktemp("viewer")) as stack:
        yield stack


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def desktop(stack: ViewerStack) -> Desktop:
    return await stack.start_desktop(paint=True)


@contextlib.asynccontextmanager
async def open_viewer(url: str) -> AsyncIterator[RFBClient]:
    """A viewer after its handshake, closed (its WebSocket and session) where it is opened."""
    async with RFBClient(await WebSocketTransport.connect(url)) as client:
        await asyncio.wait_for(client.handshake(), scaled(10))
        yield client


@contextlib.asynccontextmanager
async def open_viewers(url: str, count: int) -> AsyncIterator[list[RFBClient]]:
    """``count`` viewers of ``url``, all closed where they are opened."""
    async with contextlib.AsyncExitStack() as opened:
        yield [await opened.enter_async_context(open_viewer(url)) for _ in range(count)]


async def close_of(url: str, headers: dict[str, str] | None = None) -> tuple[int | None, str]:
    """Connect and wait for the server's close: (code, reason)."""
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(url, protocols=("binary",), headers=headers or {}) as ws,
    ):
        message = await asyncio.wait_for(ws.receive(), scaled(10))
        assert message.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED), message
        return ws.close_code, str(message.extra or "")


def settled(stack: ViewerStack) -> bool:
    return stack.viewers() == 0 and stack.server_channels() == 0


def vnc_connections(pid: int, desktop: Desktop) -> int:
    """Process ``pid``'s TCP connections to the desktop's x11vnc."""
    connections = psutil.Process(pid).net_connections(kind="tcp")
    return sum(1 for c in connections if c.raddr and c.raddr.port == desktop.vnc_port)


def relay_vnc_connections(stack: ViewerStack, desktop: Desktop) -> int:
    """Relay-side channel ends: the relay's TCP connections to the desktop's x11vnc."""
    return vnc_connections(stack.relay.pid, desktop)


async def until_closed(
    ws: aiohttp.ClientWebSocketResponse, timeout: float = 10
) -> aiohttp.WSMessage:
    """Read ``ws`` until the close arrives (each read within ``timeout``); the close message."""
    closing = (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
    while (message := await asyncio.wait_for(ws.receive(), scaled(timeout))).type not in closing:
        pass
    return message


async def send_garbage(url: str) -> tuple[bytes, int | None, str]:
    """Take the banner, send random bytes, read to the close: (banner, close code, reason)."""
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(url, protocols=("binary",)) as ws,
    ):
        banner = await asyncio.wait_for(ws.receive(), scaled(10))
        await ws.send_bytes(os.urandom(4096))
        message = await until_closed(ws)
        return banner.data, ws.close_code, str(message.extra)


async def stop_and_watch(
    stack: ViewerStack, desktop: Desktop, clients: list[RFBClient]
) -> tuple[list[int | None], float]:
    """Stop ``desktop`` with ``clients`` watching: their close codes, and the seconds from the
    start of the stop to the last close (watched from before the stop)."""
    closes: list[tuple[float, int | None]] = []

    async def wait_close(client: RFBClient) -> None:
        ws = client.t._ws  # type: ignore[attr-defined]
        await until_closed(ws, 5)
        closes.append((time.perf_counter(), ws.close_code))

    await stack.person_headers()  # signed in before the clock starts (argon2 takes its time)
    waiters = [asyncio.create_task(wait_close(c)) for c in clients]
    started = time.perf_counter()
    await stack.stop_desktop(desktop)
    stack.desktops.remove(desktop)
    await asyncio.wait_for(asyncio.gather(*waiters), scaled(5))
    return [code for _, code in closes], max(at for at, _ in closes) - started


async def full_frame(client: RFBClient) -> np.ndarray:
    await client.request_update(incremental=False)
    frame = np.zeros((client.height, client.width, 3), dtype=np.uint8)
    covered = 0
    while covered < client.width * client.height:
        for rect in await asyncio.wait_for(client.read_update(), scaled(10)):
            pixels = np.frombuffer(rect.pixels, dtype=np.uint8).reshape(rect.height, rect.width, 4)
            frame[rect.y : rect.y + rect.height, rect.x : rect.x + rect.width] = pixels[:, :, 2::-1]
            covered += rect.width * rect.height
    return frame


async def test_rfb_through_the_server_shows_exactly_the_xvfb_screen(
    stack: ViewerStack, desktop: Desktop
) -> None:
    transport = await WebSocketTransport.connect(stack.socket_url(desktop))
    async with RFBClient(transport) as client:
        banner = await asyncio.wait_for(transport.read_exactly(12), scaled(10))
        assert banner == b"RFB 003.008\n"
        # The banner is consumed: replay it through a transport that starts after it.
        transport._buf[:0] = banner
        await asyncio.wait_for(client.handshake(), scaled(10))
        assert (client.width, client.height) == (1280, 800)
        frame = await full_frame(client)
        expected = await asyncio.to_thread(capture, desktop.display)
    assert frame.shape == expected.shape
    frame, expected = (without_cursor(image, desktop.display) for image in (frame, expected))
    assert np.array_equal(frame, expected), "the framebuffer differs from the Xvfb capture"
    assert len(np.unique(expected.reshape(-1, 3), axis=0)) >= 5, "the painted screen is missing"
    await wait_until(lambda: settled(stack), 5, "the viewer to be released")


async def test_a_server_that_takes_small_frames_gets_only_frames_it_takes(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    # The server announces its frame limit in `welcome.max_frame`; 16 KiB is far below what
    # the relay reads from x11vnc at once (768 KiB).
    limit = {"max_channel_frame": 16 * 1024}
    async with viewer_stack(tmp_path_factory.mktemp("small"), server_settings=limit) as small:
        desktop = await small.start_desktop(paint=True)
        link = small.relays.get(small.relay_id)
        async with open_viewer(small.socket_url(desktop)) as client:
            frame = await full_frame(client)
            expected = await asyncio.to_thread(capture, desktop.display)
        frame, expected = (without_cursor(image, desktop.display) for image in (frame, expected))
        assert np.array_equal(frame, expected), "the framebuffer differs from the Xvfb capture"
        # The relay's link was never dropped for an oversized frame.
        assert small.relays.is_connected(small.relay_id)
        assert small.relays.get(small.relay_id) is link


@pytest.mark.parametrize(
    ("case", "code"),
    [
        ("forged", CloseCode.VIEWER_FORBIDDEN),
        ("malformed", CloseCode.VIEWER_FORBIDDEN),
        ("expired", CloseCode.VIEWER_EXPIRED),
        ("other_session", CloseCode.VIEWER_FORBIDDEN),
        # Rows are looked up by the grant's relay: that relay has no such session.
        ("wrong_relay", CloseCode.UNKNOWN_SESSION),
        ("not_a_member", CloseCode.VIEWER_FORBIDDEN),
        ("unknown_session", CloseCode.UNKNOWN_SESSION),
    ],
)
async def test_refused_viewers_never_open_a_relay_channel(
    stack: ViewerStack, desktop: Desktop, case: str, code: CloseCode
) -> None:
    sid = desktop.desktop_session_id
    good = stack.token(sid)
    headers: dict[str, str] = {}
    path_sid, token = sid, good
    if case == "forged":
        token = good[:-4] + ("AAAA" if not good.endswith("AAAA") else "BBBB")
    elif case == "malformed":
        token = "not-a-token"
    elif case == "expired":
        token = stack.token(sid, ttl_s=-5)
    elif case == "other_session":
        token = stack.token("f" * 32)
    elif case == "wrong_relay":
        token = stack.token(sid, relay_id="someone-elses-relay")
    elif case == "not_a_member":
        token = stack.token(sid, user_id="user-who-is-not-a-member")
    elif case == "unknown_session":
        path_sid = token_sid = "e" * 32
        token = stack.token(token_sid)
    opens = stack.channel_opens()
    url = f"{stack.ws_base}/vnc/{path_sid}/{token}/websockify"
    close_code, reason = await close_of(url, headers)
    assert close_code == code, (close_code, reason)
    assert reason, "every refusal names its reason"
    assert token not in reason
    assert stack.channel_opens() == opens, "a refused viewer reached the relay"
    assert settled(stack)


async def test_a_cross_origin_viewer_is_refused_before_the_handshake(
    stack: ViewerStack, desktop: Desktop
) -> None:
    opens = stack.channel_opens()
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await session.ws_connect(
                stack.socket_url(desktop), headers={"Origin": "http://evil.example"}
            )
    assert refused.value.status == 403
    assert stack.channel_opens() == opens, "a refused viewer reached the relay"
    assert settled(stack)


async def test_same_origin_browser_is_admitted(stack: ViewerStack, desktop: Desktop) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(
            stack.socket_url(desktop), protocols=("binary",), headers={"Origin": stack.url}
        ) as ws,
    ):
        assert ws.protocol == "binary"
        message = await asyncio.wait_for(ws.receive(), scaled(10))
        assert message.type == aiohttp.WSMsgType.BINARY
        assert message.data.startswith(b"RFB 003.008")
    await wait_until(lambda: settled(stack), 5, "the viewer to be released")


async def test_garbage_is_forwarded_and_the_tunnel_closes_cleanly(
    stack: ViewerStack, desktop: Desktop
) -> None:
    tasks_before = len(asyncio.all_tasks())
    _, code, reason = await send_garbage(stack.socket_url(desktop))
    # x11vnc hangs up on the bad handshake; the desktop still runs, so no "stopped".
    assert code == CloseCode.NORMAL, (code, reason)
    assert "VNC server ended the stream" in reason
    await wait_until(lambda: settled(stack), 5, "the viewer to be released")
    await wait_until(lambda: relay_vnc_connections(stack, desktop) == 0, 5, "relay side closed")
    await wait_until(lambda: len(asyncio.all_tasks()) <= tasks_before, 5, "tasks to finish")


async def test_text_frames_are_refused_with_a_reason(stack: ViewerStack, desktop: Desktop) -> None:
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(stack.socket_url(desktop), protocols=("binary",)) as ws,
    ):
        await ws.send_str("hello")
        await until_closed(ws)
        assert ws.close_code == CloseCode.UNSUPPORTED_DATA
    await wait_until(lambda: settled(stack), 5, "the viewer to be released")


# Bytes owed to a viewer that stopped reading once its channel is full: a quarter of the
# channel's first window.
STALLED_OWED = 256 * 1024


async def measure(client: RFBClient, seconds: float) -> float:
    """MB/s of full-screen updates for ``seconds``."""
    received = 0
    deadline = time.perf_counter() + seconds
    start = time.perf_counter()
    while time.perf_counter() < deadline:
        await client.request_update(incremental=False)
        for rect in await client.read_update():
            received += len(rect.pixels)
    return received / (time.perf_counter() - start) / 1e6


@contextlib.asynccontextmanager
async def stalled_viewer(url: str) -> AsyncIterator[RFBClient]:
    """A viewer that asks for a flood of full updates and then never reads again."""
    async with open_viewer(url) as stalled:
        for _ in range(40):
            await stalled.request_update(incremental=False)
        yield stalled


async def test_a_viewer_that_stops_reading_holds_bounded_memory(
    stack: ViewerStack, desktop: Desktop
) -> None:
    async with (
        open_viewer(stack.socket_url(desktop)) as fast,
        stalled_viewer(stack.socket_url(desktop)),
    ):
        rss_before = psutil.Process().memory_info().rss
        buffered: list[int] = []
        # Ten seconds without reading while the other viewer streams.
        for _ in range(10):
            assert await measure(fast, 1.0) > 0
            buffered.extend(s.backend.channel.buffered for s in _sessions(stack))
        rss_after = psutil.Process().memory_info().rss
    # One credit window per channel at most, whatever the viewer does.
    assert all(size <= MAX_WINDOW for size in buffered), buffered
    assert rss_after - rss_before < 64 * 1024 * 1024
    await wait_until(lambda: settled(stack), 10, "both viewers to be released")


async def test_a_viewer_that_stops_reading_does_not_stall_another_desktops_viewer(
    stack: ViewerStack, desktop: Desktop
) -> None:
    """The desktops of a relay share its one link to the server: a viewer that keeps asking
    for full-screen updates and never reads fills its channel's window, and a viewer of another
    desktop on that relay still gets every full-screen update it asks for (head-of-line blocking
    on the link would freeze it). One desktop's viewers share its x11vnc, which waits for the
    slowest of them (docs/viewing.md): that is why this is seen across desktops."""
    other = await stack.start_desktop("neighbour")

    def owed() -> int:
        sessions = _sessions(stack, desktop.desktop_session_id)
        return max((int(s.backend.channel.buffered) for s in sessions), default=0)

    try:
        async with open_viewer(stack.socket_url(desktop)) as stalled:

            async def keep_asking() -> None:
                while True:
                    await stalled.request_update(incremental=False)
                    await asyncio.sleep(0.05)

            asking = asyncio.create_task(keep_asking())
            try:
                await wait_until(
                    lambda: owed() >= STALLED_OWED, 20, "the stalled viewer's channel to fill"
                )
                async with open_viewer(stack.socket_url(other)) as fast:
                    for _ in range(20):
                        await fast.request_update(incremental=False)
                        rects = await asyncio.wait_for(fast.read_update(), scaled(10))
                        assert sum(len(rect.pixels) for rect in rects) == 1280 * 800 * 4
            finally:
                asking.cancel()
                with contextlib.suppress(asyncio.CancelledError, OSError, RFBError):
                    await asking
    finally:
        await stack.stop_desktop(other)
    await wait_until(lambda: settled(stack), 10, "the viewers to be released")


def _sessions(stack: ViewerStack, desktop_session_id: str | None = None) -> list:  # type: ignore[type-arg]
    """The server's viewer sessions (of one desktop, or all)."""
    registry = stack.app.state.parts.viewer.registry
    return [
        session
        for key, group in registry._sessions.items()
        if desktop_session_id in (None, key[1])  # key: (relay_id, desktop_session_id)
        for session in group
    ]


async def test_many_viewers_and_closing_one_stops_nothing(
    stack: ViewerStack, desktop: Desktop
) -> None:
    async with open_viewers(stack.socket_url(desktop), 5) as clients:
        assert stack.viewers(desktop.desktop_session_id) == 5
        await clients[0].close()
        await wait_until(lambda: stack.viewers() == 4, 5, "one viewer to close")
        for client in clients[1:]:
            frame = await full_frame(client)
            assert frame.shape == (800, 1280, 3)
    await wait_until(lambda: settled(stack), 5, "all viewers to be released")
    status = await stack.relays.request(stack.relay_id, "desktop.status", {}, 10)
    sessions = [row["desktop_session_id"] for row in status["desktops"]]
    assert desktop.desktop_session_id in sessions, "closing viewers stopped the desktop"


async def test_stopping_the_desktop_closes_every_viewer_and_its_tokens(
    stack: ViewerStack, desktop: Desktop
) -> None:
    async with open_viewers(stack.socket_url(desktop), 3) as clients:
        codes, last_close_s = await stop_and_watch(stack, desktop, clients)
    assert all(code == CloseCode.DESKTOP_STOPPED for code in codes), codes
    assert last_close_s < scaled(2)
    await wait_until(lambda: settled(stack), 5, "all viewers to be released")

    # A token for the stopped (or since replaced) session opens nothing.
    replacement = await stack.start_desktop()
    opens = stack.channel_opens()
    code, reason = await close_of(stack.socket_url(desktop))
    assert code == CloseCode.DESKTOP_STOPPED, (code, reason)
    assert stack.channel_opens() == opens
    assert replacement.desktop_session_id != desktop.desktop_session_id
