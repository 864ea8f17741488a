"""One server per SQLite data directory; a server binds before it says it is ready; rows left
``unknown`` while their relay is connected heal at once."""

from __future__ import annotations

from pathlib import Path

import pytest

from server.db.store import Store
from tests.support.processes import ManagedProcess, ProcessFactory, free_port, scaled
from tests.support.stack import (
    QUICK_DESKTOPS,
    Seed,
    relaydesk_argv,
    seed_action,
    start_relay,
    start_server,
    wait_until,
)

pytestmark = pytest.mark.integration


async def _states(url: str, seed: Seed) -> dict[str, str]:
    listed = await seed_action(url, seed, "desktop_list_active")
    return {row["desktop_session_id"]: row["state"] for row in listed["desktops"]}


def _second_server(factory: ProcessFactory, seed: Seed, port: int, **env: str) -> ManagedProcess:
    argv = relaydesk_argv("server", "--host", "127.0.0.1", "--port", str(port))
    return factory(argv, name="second-server", env={**seed.env(), **env})


async def _running_desktop(factory: ProcessFactory, seed: Seed) -> tuple[str, str]:
    server = await start_server(factory, seed)
    start_relay(
        factory, seed, server.url, env=QUICK_DESKTOPS, extra_args=("--stop-desktops-on-exit",)
    )
    await wait_until(lambda: server.relays_connected() == 1, 20, "the relay to connect")
    started = await seed_action(server.url, seed, "desktop_start", slot="main")
    return server.url, started["desktop"]["desktop_session_id"]


async def test_a_second_server_on_the_same_data_directory_refuses_and_touches_nothing(
    seed: Seed, process_factory: ProcessFactory
) -> None:
    url, session_id = await _running_desktop(process_factory, seed)
    second = _second_server(process_factory, seed, free_port())
    assert second.wait(scaled(20)) == 1, second.log_text()
    log = second.log_text()
    assert "already running on" in log and str(seed.data_dir) in log, log
    assert "server ready" not in log and "Traceback" not in log, log
    assert (await _states(url, seed))[session_id] == "running"


async def test_a_taken_port_is_refused_before_the_server_says_it_is_ready(
    seed: Seed, process_factory: ProcessFactory, tmp_path: Path
) -> None:
    url, session_id = await _running_desktop(process_factory, seed)
    port = int(url.rsplit(":", 1)[1])
    other = tmp_path / "other-data"
    second = _second_server(
        process_factory,
        seed,
        port,
        RELAYDESK_DATA_DIR=str(other),
        RELAYDESK_DATABASE_URL=f"sqlite+aiosqlite:///{other / 'relaydesk.db'}",
    )
    assert second.wait(scaled(20)) == 1, second.log_text()
    log = second.log_text()
    assert f"cannot serve on 127.0.0.1:{port}" in log, log
    assert "server ready" not in log and "Traceback" not in log, log
    assert (await _states(url, seed))[session_id] == "running"


async def test_rows_marked_unknown_while_their_relay_is_connected_heal_at_once(
    seed: Seed, process_factory: ProcessFactory
) -> None:
    url, session_id = await _running_desktop(process_factory, seed)
    store = await Store.open(seed.database_url)
    try:  # what another server process on the same database used to do
        marked = await store.mark_relay_unknown(seed.relay["relay_id"])
    finally:
        await store.close()
    assert [row.state for row in marked] == ["unknown"]
    assert (await _states(url, seed))[session_id] == "running"
