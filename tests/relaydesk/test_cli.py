"""The command line as an operator meets it: version, readable admin output, account recovery,
``db upgrade``, ``desktops list|stop`` through a live server's API, and ``relaydesk mcp``'s
usage."""

from __future__ import annotations

import asyncio
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.processes import scaled
from tests.support.stack import Seed, inprocess_server, seed_database

pytestmark = pytest.mark.integration


@dataclass
class Cli:
    returncode: int
    stdout: str
    stderr: str


async def relaydesk(env: dict[str, str], *args: str, stdin: str = "") -> Cli:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "relaydesk",
        *args,
        env={**os.environ, **env},
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(stdin.encode()), scaled(60))
    assert process.returncode is not None
    return Cli(process.returncode, out.decode(), err.decode())


@pytest.fixture
async def seed(tmp_path: Path) -> Seed:
    return await seed_database(tmp_path / "data")


async def test_version() -> None:
    cli = await relaydesk({}, "--version")
    assert cli.returncode == 0
    assert cli.stdout.startswith("relaydesk ") and cli.stdout.split()[1][0].isdigit()


async def test_admin_list_prints_a_table_and_names_the_database(seed: Seed) -> None:
    cli = await relaydesk(seed.env(), "admin", "list", "users")
    assert cli.returncode == 0, cli.stderr
    header, row = cli.stdout.splitlines()
    assert header.split()[:3] == ["USERNAME", "USER_ID", "IS_ADMIN"]
    assert row.split()[0] == "alice" and "yes" in row.split()
    assert f"database {seed.data_dir / 'relaydesk.db'}" in cli.stderr


async def test_an_empty_list_says_so(seed: Seed) -> None:
    cli = await relaydesk(seed.env(), "admin", "list-tokens", "--json")
    assert cli.returncode == 0
    cli = await relaydesk(seed.env(), "admin", "audit")
    assert (cli.returncode, cli.stdout.strip()) == (0, "no audit rows (for these filters)")


async def test_a_mistyped_data_directory_is_not_created_by_a_read(tmp_path: Path) -> None:
    typo = tmp_path / "relaydsk"
    cli = await relaydesk({"RELAYDESK_DATA_DIR": str(typo)}, "admin", "list", "users")
    assert cli.returncode == 1
    assert f"no database at {typo / 'relaydesk.db'}" in cli.stderr
    assert not typo.exists()


async def test_login_link_and_set_password_let_a_user_back_in(seed: Seed) -> None:
    async with inprocess_server(seed) as (_app, url):
        cli = await relaydesk(seed.env(), "admin", "login-link", "alice", "--url", url)
        assert cli.returncode == 0, cli.stderr
        link = next(line.split()[-1] for line in cli.stdout.splitlines() if "login_url" in line)
        assert link.startswith(f"{url}/login/rdl_")
        async with httpx.AsyncClient(timeout=scaled(10)) as client:
            page = await client.get(link, follow_redirects=False)
            assert page.status_code == 200 and not page.cookies, "opening it spends nothing"
            response = await client.post(link, follow_redirects=False)
            assert response.status_code in (302, 303), response.text
            assert response.cookies, "the link signs the browser in"
            again = await client.post(link, follow_redirects=False)
            assert not again.cookies, "a login link works once"

        cli = await relaydesk(
            seed.env(),
            "admin",
            "set-password",
            "alice",
            "--password-stdin",
            stdin="correct horse battery staple\n",
        )
        assert cli.returncode == 0, cli.stderr
        async with httpx.AsyncClient(base_url=url, timeout=scaled(10)) as client:
            login = await client.post(
                "/api/v1/login",
                json={"username": "alice", "password": "correct horse battery staple"},
                headers={"Origin": url},
            )
        assert login.status_code == 200, login.text


async def test_db_upgrade_says_what_it_did(tmp_path: Path) -> None:
    env = {"RELAYDESK_DATA_DIR": str(tmp_path / "fresh")}
    first = await relaydesk(env, "db", "upgrade")
    assert first.returncode == 0, first.stderr
    assert "upgraded from empty to" in first.stderr
    second = await relaydesk(env, "db", "upgrade")
    assert "is already at the newest schema" in second.stderr


async def test_desktops_list_and_stop_go_through_the_api(seed: Seed, tmp_path: Path) -> None:
    from wire.ids import RelayId

    token = tmp_path / "api.token"
    token.write_text(seed.api_token)
    async with inprocess_server(seed) as (app, url):
        env = {**seed.env(), "RELAYDESK_API_TOKEN": ""}
        base = ("--server", url, "--token-file", str(token))
        empty = await relaydesk(env, "desktops", "list", *base)
        assert (empty.returncode, empty.stdout.strip()) == (
            0,
            "no desktops running in this conversation",
        ), empty.stderr

        row = _row(seed, "ds_" + "a" * 30)
        await app.state.parts.inventory.record_started(RelayId(seed.relay["relay_id"]), row)
        listed = await relaydesk(env, "desktops", "list", *base)
        assert listed.returncode == 0, listed.stderr
        assert "running" in listed.stdout and row["desktop_session_id"] in listed.stdout

        # The relay is not connected: the stop goes through the same action and is refused.
        stop = await relaydesk(env, "desktops", "stop", "relay-1", "main", *base)
        assert stop.returncode == 1
        assert "relay_unreachable" in stop.stderr
        audit = await app.state.parts.store.list_audit(limit=100)
        assert any(a.op.startswith("desktop.stop") for a in audit)

        # A relay the conversation does not have: said so, with the ones it has.
        unknown = await relaydesk(env, "desktops", "stop", "nosuchrelay", "main", *base)
        assert unknown.returncode == 1
        assert "no relay named 'nosuchrelay'" in unknown.stderr
        assert "relay-1" in unknown.stderr and "relay_not_found" in unknown.stderr


def _row(seed: Seed, session_id: str) -> dict[str, Any]:
    return {
        "desktop_session_id": session_id,
        "kind": "virtual",
        "slot": "main",
        "state": "running",
        "started_at": "2026-01-01T00:00:00Z",
        "started_by": "alice",
    }


async def test_desktops_without_a_token_is_bad_usage(seed: Seed) -> None:
    env = {**seed.env(), "RELAYDESK_API_TOKEN": ""}
    cli = await relaydesk(env, "desktops", "list", "--server", "http://127.0.0.1:9")
    assert cli.returncode == 2
    assert "RELAYDESK_API_TOKEN" in cli.stderr


async def test_the_former_setting_names_still_work_and_say_they_are_deprecated(
    seed: Seed,
) -> None:
    async with inprocess_server(seed) as (_app, url):
        former = {
            **seed.env(),
            "RELAYDESK_SERVER_URL": "",
            "RELAYDESK_API_TOKEN": "",
            "RELAYDESK_URL": url,
            "RELAYDESK_TOKEN": seed.api_token,
        }
        cli = await relaydesk(former, "desktops", "list")
        assert cli.returncode == 0, cli.stderr
        assert "RELAYDESK_URL is deprecated" in cli.stderr and "RELAYDESK_SERVER_URL" in cli.stderr
        assert "RELAYDESK_TOKEN is deprecated" in cli.stderr and "RELAYDESK_API_TOKEN" in cli.stderr
        assert seed.api_token not in cli.stderr + cli.stdout

        current = {**former, "RELAYDESK_SERVER_URL": url, "RELAYDESK_API_TOKEN": seed.api_token}
        current |= {"RELAYDESK_URL": "http://127.0.0.1:9", "RELAYDESK_TOKEN": "rdk_old"}
        cli = await relaydesk(current, "desktops", "list")
        assert cli.returncode == 0, cli.stderr
        assert "deprecated" not in cli.stderr, "the current names win, silently"


async def test_mcp_help_explains_the_command_and_the_client_configuration() -> None:
    cli = await relaydesk({}, "mcp", "--help")
    assert cli.returncode == 0
    for words in (
        "stdin/stdout",
        "--conversation",
        "RELAYDESK_API_TOKEN",
        "mcpServers",
        "/api/v1/conversations/ID/mcp",
    ):
        assert words in cli.stdout, words
    listed = await relaydesk({}, "--help")
    assert "mcp" in listed.stdout


async def test_mcp_usage_mistakes_exit_2_naming_what_is_missing() -> None:
    env = {"RELAYDESK_API_TOKEN": "", "RELAYDESK_CONVERSATION_ID": ""}
    no_conversation = await relaydesk(env, "mcp")
    assert no_conversation.returncode == 2 and "--conversation" in no_conversation.stderr
    no_token = await relaydesk(env, "mcp", "--conversation", "c1")
    assert no_token.returncode == 2 and "RELAYDESK_API_TOKEN" in no_token.stderr
