"""The relay connection with real ``relaydesk server`` and ``relaydesk relay`` processes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import socket
from collections.abc import Sequence
from typing import Any

import httpx
import pytest

from relay.desktops.process import group_exists
from server.db.store import Store
from tests.support import stack
from tests.support.processes import (
    ManagedProcess,
    ProcessExited,
    ProcessFactory,
    free_port,
    scaled,
)
from tests.support.stack import (
    Seed,
    inprocess_server,
    start_relay,
    start_server,
    wait_until,
)
from wire.ids import RelayId

pytestmark = pytest.mark.integration


async def test_relay_connects_and_a_wrong_token_is_refused_without_being_logged(
    seed: Seed, process_factory: ProcessFactory
) -> None:
    server = await start_server(process_factory, seed)
    start_relay(process_factory, seed, server.url)
    await wait_until(lambda: server.relays_connected() == 1, 20, "the relay to connect")

    wrong = "rdr_this-token-was-never-issued-0123456789"
    intruder = start_relay(process_factory, seed, server.url, token=wrong, name="intruder")
    await intruder.wait_for_line_async("refused this relay's token", scaled(20))
    await server.process.wait_for_line_async("relay connection refused", scaled(10))

    assert server.relays_connected() == 1, "a refused relay must not disturb the connected one"
    assert wrong not in server.process.log_text()
    assert seed.relay_token not in server.process.log_text()
    assert wrong not in intruder.log_text()


async def test_relay_comes_back_after_a_server_restart(
    seed: Seed, process_factory: ProcessFactory
) -> None:
    server = await start_server(process_factory, seed)
    relay = start_relay(process_factory, seed, server.url)
    await wait_until(lambda: server.relays_connected() == 1, 20, "the relay to connect")

    server.process.terminate(scaled(10))
    await relay.wait_for_line_async("cannot reach the server|disconnected", scaled(10))
    restarted = await start_server(process_factory, seed, port=server.port)
    # backoff is bounded at 1 s in these tests: the relay must be back well within a few
    await wait_until(lambda: restarted.relays_connected() == 1, 5, "the relay to reconnect")
    assert relay.is_alive()


async def test_a_killed_relay_is_marked_disconnected_within_the_liveness_timeout(
    seed: Seed, process_factory: ProcessFactory
) -> None:
    server = await start_server(process_factory, seed)
    relay = start_relay(process_factory, seed, server.url)
    await wait_until(lambda: server.relays_connected() == 1, 20, "the relay to connect")

    relay.send_signal(signal.SIGKILL)
    # liveness timeout is 3 s in FAST_ENV; allow one more second
    await wait_until(lambda: server.relays_connected() == 0, 4, "the server to drop the relay")


async def test_a_relay_redials_a_server_that_fell_silent(
    seed: Seed, process_factory: ProcessFactory
) -> None:
    server = await start_server(process_factory, seed)
    relay = start_relay(process_factory, seed, server.url)
    await wait_until(lambda: server.relays_connected() == 1, 20, "the relay to connect")

    server.process.send_signal(signal.SIGSTOP)  # alive, but answers nothing: no pings, no pongs
    try:
        await relay.wait_for_line_async("fell silent", scaled(10))
    finally:
        server.process.send_signal(signal.SIGCONT)
    await wait_until(lambda: server.relays_connected() == 1, 10, "the relay to come back")


async def test_revoking_a_relay_token_closes_its_live_connection(
    seed: Seed, process_factory: ProcessFactory
) -> None:
    server = await start_server(process_factory, seed)
    relay = start_relay(process_factory, seed, server.url)
    await wait_until(lambda: server.relays_connected() == 1, 20, "the relay to connect")

    store = await Store.open(seed.database_url)
    try:
        await store.revoke_relay(seed.relay["relay_id"])
        await wait_until(lambda: server.relays_connected() == 0, 5, "the revoked relay to go")
        await relay.wait_for_line_async("refused this relay's token", scaled(10))
        assert server.relays_connected() == 0, "a revoked token must not reconnect"
        (row,) = [r for r in await store.list_relays() if r.relay_id == seed.relay["relay_id"]]
        assert row.revoked
        assert not row.connected
        assert row.last_seen_at is not None
    finally:
        await store.close()


async def test_a_second_relay_with_the_same_token_replaces_the_first(
    seed: Seed, process_factory: ProcessFactory
) -> None:
    server = await start_server(process_factory, seed)
    first = start_relay(process_factory, seed, server.url, name="first")
    await wait_until(lambda: server.relays_connected() == 1, 20, "the first relay to connect")
    await first.wait_for_line_async("connected to", scaled(10))

    second = start_relay(process_factory, seed, server.url, name="second")
    await second.wait_for_line_async("connected to", scaled(20))
    await first.wait_for_line_async("another relay process connected", scaled(10))
    assert first.wait(scaled(10)) == 3, "the replaced relay steps aside with exit code 3"
    assert second.is_alive()
    assert server.relays_connected() == 1


async def test_200_concurrent_requests_over_one_connection_are_all_answered(
    seed: Seed, process_factory: ProcessFactory
) -> None:
    async with inprocess_server(seed) as (app, url):
        start_relay(process_factory, seed, url)
        relay_id = RelayId(seed.relay["relay_id"])
        await wait_until(
            lambda: app.state.parts.relays.is_connected(relay_id), 20, "the relay to connect"
        )
        announced = app.state.parts.relays.capabilities(relay_id)
        assert {"session_identity", "virtual_desktop", "screen", "screen_guard"} <= announced

        answers = await asyncio.gather(
            *(
                app.state.parts.relays.request(relay_id, "ping", {"echo": n}, 20.0)
                for n in range(200)
            )
        )
        assert [answer["echo"] for answer in answers] == list(range(200))
        assert app.state.parts.relays.get(relay_id).connection.pending_requests == 0


async def test_a_relay_told_to_stop_closes_its_connection_and_its_desktops(
    seed: Seed, process_factory: ProcessFactory
) -> None:
    server = await start_server(process_factory, seed)
    env = {"RELAYDESK_DESKTOP_APPS": ",", "RELAYDESK_WINDOW_MANAGER": "true"}
    relay = start_relay(
        process_factory, seed, server.url, extra_args=("--stop-desktops-on-exit",), env=env
    )
    await wait_until(lambda: server.relays_connected() == 1, 20, "the relay to connect")
    headers = {"Authorization": f"Bearer {seed.api_token}"}
    async with httpx.AsyncClient(base_url=server.url, timeout=scaled(60)) as http:
        started = await http.post(
            "/api/v1/actions/desktop_start",
            json={"conversation_id": seed.conversation_id, "geometry": "800x600"},
            headers=headers,
        )
    assert started.status_code == 200, started.text
    state = json.loads((seed.data_dir / "relay-state" / "desktops.json").read_text())
    groups = [p["pgid"] for record in state["desktops"] for p in record["processes"]]
    # Its window manager here is `true`, which has ended; the desktop's own processes run.
    running = [
        p["pgid"] for record in state["desktops"] for p in record["processes"] if p["essential"]
    ]
    assert running and all(group_exists(pgid) for pgid in running)

    # SIGTERM (what a service manager sends): the relay leaves on its own, it is not killed.
    assert await asyncio.to_thread(relay.terminate, 10) == 0
    log = relay.log_text()
    assert "relay stopped" in log and "fell silent" not in log
    # Told, not left to find out by liveness (3 s here).
    await wait_until(lambda: server.relays_connected() == 0, 2, "the server to drop the relay")
    assert not any(group_exists(pgid) for pgid in groups), "its desktops were left running"


async def test_a_relay_told_to_stop_while_still_connecting_exits_at_once(
    seed: Seed, process_factory: ProcessFactory
) -> None:
    # A "server" that accepts the TCP connection and never answers the WebSocket upgrade, as
    # a server behind a stuck proxy would: the relay waits in its connect.
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    silent.setblocking(False)
    held: list[socket.socket] = []  # accepted, never read, never answered

    def dialled() -> bool:
        with contextlib.suppress(BlockingIOError):
            held.append(silent.accept()[0])
        return bool(held)

    try:
        port = silent.getsockname()[1]
        relay = start_relay(process_factory, seed, f"http://127.0.0.1:{port}")
        await wait_until(dialled, 20, "the relay to dial")
        assert await asyncio.to_thread(relay.terminate, 10) == 0
        assert "relay stopped" in relay.log_text()
    finally:
        for connection in [*held, silent]:
            connection.close()


async def test_a_server_port_taken_before_its_bind_is_picked_again_and_a_given_one_is_not(
    seed: Seed, process_factory: ProcessFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The suite's own helper: a port another process took after ``free_port`` chose it (the
    race behind servers that "never became ready") makes it pick another port; a port the test
    asked for fails at once, with the server's reason."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        picks = iter([busy])
        monkeypatch.setattr(stack, "free_port", lambda: next(picks, None) or free_port())

        started: list[ManagedProcess] = []

        def factory(argv: Sequence[str], **kwargs: Any) -> ManagedProcess:
            started.append(process_factory(argv, **kwargs))
            return started[-1]

        server = await start_server(factory, seed)
        assert server.port != busy
        assert server.relays_connected() == 0
        assert [p.is_alive() for p in started] == [False, True]
        assert f"127.0.0.1:{busy}: Address already in use" in started[0].log_text()

        server.process.terminate(scaled(10))  # one server per database
        with pytest.raises(ProcessExited, match=f"127.0.0.1:{busy}: Address already in use"):
            await start_server(process_factory, seed, port=busy)
