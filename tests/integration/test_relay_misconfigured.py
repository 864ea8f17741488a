"""A relay whose configuration cannot work says so in one line and exits; network errors
are retried."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.processes import ManagedProcess, ProcessFactory, free_port, scaled
from tests.support.stack import Seed, relaydesk_argv, start_relay, start_server

pytestmark = pytest.mark.integration

CONFIG_ERROR_EXIT = 2


def _relay(factory: ProcessFactory, seed: Seed, *args: str) -> ManagedProcess:
    env = {**seed.env(), "RELAYDESK_RELAY_TOKEN": ""}
    return factory(relaydesk_argv("relay", *args), name="relay", env=env)


def _error_lines(process: ManagedProcess) -> list[str]:
    assert process.wait(scaled(20)) == CONFIG_ERROR_EXIT, process.log_text()
    text = process.log_text()
    assert "Traceback" not in text, text
    return [line for line in text.splitlines() if "error" in line.lower() or "relay:" in line]


async def test_a_missing_token_file_is_one_line_naming_the_file(
    seed: Seed, process_factory: ProcessFactory, tmp_path: Path
) -> None:
    missing = tmp_path / "nowhere" / "relay.token"
    relay = _relay(
        process_factory, seed, "--server", "http://127.0.0.1:9", "--token-file", str(missing)
    )
    assert relay.wait(scaled(20)) == CONFIG_ERROR_EXIT, relay.log_text()
    text = relay.log_text()
    assert text.strip().splitlines() == [f"relaydesk relay: --token-file {missing}: no such file"]


@pytest.mark.parametrize("url", ["127.0.0.1:8400", "localhost", "ftp://127.0.0.1:8400"])
async def test_a_server_url_without_a_usable_scheme_is_refused_at_once(
    seed: Seed, process_factory: ProcessFactory, url: str
) -> None:
    token = seed.data_dir / "relay.token"
    token.write_text(seed.relay_token)
    relay = _relay(process_factory, seed, "--server", url, "--token-file", str(token))
    (line,) = _error_lines(relay)
    assert line.startswith("relaydesk relay: --server") and "https://" in line, line


async def test_a_wrong_path_fails_fast_with_the_url_it_tried(
    seed: Seed, process_factory: ProcessFactory
) -> None:
    server = await start_server(process_factory, seed)
    relay = start_relay(process_factory, seed, f"{server.url}/relaydesk")
    lines = _error_lines(relay)
    assert any("/relaydesk/relay/v1/connect answered HTTP 40" in line for line in lines), lines


async def test_https_against_a_plain_http_server_fails_fast_naming_tls(
    seed: Seed, process_factory: ProcessFactory
) -> None:
    server = await start_server(process_factory, seed)
    relay = start_relay(process_factory, seed, server.url.replace("http://", "https://"))
    lines = _error_lines(relay)
    assert any("TLS" in line and "http://" in line for line in lines), lines


async def test_a_refused_token_stops_the_relay_naming_where_the_token_came_from(
    seed: Seed, process_factory: ProcessFactory
) -> None:
    server = await start_server(process_factory, seed)
    wrong = "rdr_this-token-was-never-issued-0123456789"
    relay = start_relay(process_factory, seed, server.url, token=wrong, name="refused")
    lines = _error_lines(relay)
    token_file = seed.data_dir / "refused.token"
    assert any(f"from the token file {token_file}" in line for line in lines), lines
    assert not any("RELAYDESK_RELAY_TOKEN" in line for line in lines), lines
    assert wrong not in relay.log_text()


async def test_a_server_that_is_not_there_yet_is_retried(
    seed: Seed, process_factory: ProcessFactory
) -> None:
    port = free_port()
    relay = start_relay(process_factory, seed, f"http://127.0.0.1:{port}")
    await relay.wait_for_line_async("cannot reach the server", scaled(20))
    await relay.wait_for_line_async("reconnecting in", scaled(20))
    assert relay.is_alive()
    server = await start_server(process_factory, seed, port=port)
    await relay.wait_for_line_async("connected to", scaled(20))
    assert server.relays_connected() == 1
