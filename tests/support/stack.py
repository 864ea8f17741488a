"""Bring up real relaydesk processes for tests: a database, a server, relays."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from relaydesk.run import uvicorn_config
from server import admin
from server.app import create_app
from server.config import Settings
from server.db.migrate import upgrade
from server.db.store import Store
from server.secrets.passwords import fast_hasher
from tests.support.processes import (
    ManagedProcess,
    ProcessExited,
    ProcessFactory,
    free_port,
    scaled,
)

# Short liveness figures so tests see disconnects quickly (never timing assertions).
FAST_ENV = {
    "RELAYDESK_HEARTBEAT_S": "1",
    "RELAYDESK_LIVENESS_TIMEOUT_S": "3",
    "RELAYDESK_RELAY_BACKOFF_MAX_S": "1",
    "RELAYDESK_PRESENCE_INTERVAL_S": "0.5",
    "RELAYDESK_LOG_LEVEL": "info",
}
# Desktops with no apps and no window manager: they start in a blink.
QUICK_DESKTOPS = {"RELAYDESK_DESKTOP_APPS": ",", "RELAYDESK_WINDOW_MANAGER": ""}

RELAY_STATE_DIRS: set[Path] = set()


@dataclass
class Seed:
    """What a fresh database holds for a test: a user, a conversation, a relay."""

    data_dir: Path
    database_url: str
    user: dict[str, Any]
    api_token: str
    conversation_id: str
    relay: dict[str, Any]

    @property
    def relay_token(self) -> str:
        return str(self.relay["token"])

    @property
    def relay_authority(self) -> Path:
        """The relay's X authority file: a cookie per live desktop of this seed's relays."""
        return self.data_dir / "relay-state" / "run" / "Xauthority"

    def use_relay_authority(self) -> None:
        """Let this (test) process open the displays of this seed's relays' desktops, as the
        relay's own screen tool does; nothing else can (docs/desktops.md)."""
        os.environ["XAUTHORITY"] = str(self.relay_authority)

    def env(self) -> dict[str, str]:
        return {
            **FAST_ENV,
            "RELAYDESK_DATA_DIR": str(self.data_dir),
            "RELAYDESK_DATABASE_URL": self.database_url,
            "RELAYDESK_STATE_DIR": str(self.data_dir / "relay-state"),
        }


async def seed_database(
    data_dir: Path, relay_name: str = "relay-1", *, co_located: bool = False
) -> Seed:
    """Migrate a SQLite database in ``data_dir`` and create the usual test principals
    (``co_located``: the relay is registered as running on the server's host).

    The user's password is stored with a cheap argon2 hash: most tests never log in, and a
    server re-hashes it with its own parameters at the first login (as for any older hash),
    so what a login costs and checks stays the server's."""
    data_dir.mkdir(parents=True, exist_ok=True)
    url = f"sqlite+aiosqlite:///{data_dir / 'relaydesk.db'}"
    await upgrade(url)
    store = await Store.open(url, password_hasher=fast_hasher())
    try:
        user = await admin.create_user(store, "alice", is_admin=True)
        token = await admin.create_token(store, "alice")
        conversation = await admin.create_conversation(store, "Team", ["alice:owner"])
        relay = await admin.add_relay(store, relay_name, "alice", co_located=co_located)
        await admin.share_relay(store, relay["relay_id"], conversation["conversation_id"])
    finally:
        await store.close()
    return Seed(data_dir, url, user, token["token"], conversation["conversation_id"], relay)


async def add_relay(seed: Seed, name: str, *, co_located: bool = False) -> dict[str, Any]:
    store = await Store.open(seed.database_url)
    try:
        relay = await admin.add_relay(store, name, "alice", co_located=co_located)
        await admin.share_relay(store, relay["relay_id"], seed.conversation_id)
        return relay
    finally:
        await store.close()


def relaydesk_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "relaydesk", *args]


def get_json(url: str, timeout: float = 2.0) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"null")


async def wait_until(predicate: Any, timeout: float, what: str, interval: float = 0.05) -> None:
    """Poll ``predicate`` (sync or async) until true; fail naming ``what``."""
    deadline = asyncio.get_running_loop().time() + scaled(timeout)
    while True:
        result = predicate()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {scaled(timeout):.1f}s waiting for {what}")
        await asyncio.sleep(interval)


@dataclass
class ServerProcess:
    process: ManagedProcess
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def relays_connected(self) -> int:
        try:
            status, body = get_json(f"{self.url}/readyz", timeout=1.0)
        except (urllib.error.URLError, OSError):
            return -1
        return int(body["relays_connected"]) if status == 200 else -1


async def start_server(
    factory: ProcessFactory, seed: Seed, port: int | None = None, env: dict[str, str] | None = None
) -> ServerProcess:
    """A server process on ``port``, or on a free port of its own: another process may bind a
    port between ``free_port`` and the server's bind (the tests' clients take ephemeral ports
    all the time), so a port of its own that turns out taken is picked again (3 tries)."""
    tries = 3
    while True:
        chosen = port or free_port()
        process = factory(
            relaydesk_argv("server", "--host", "127.0.0.1", "--port", str(chosen)),
            name="server",
            env={**seed.env(), **(env or {})},
        )
        try:
            return await _ready(ServerProcess(process, chosen))
        except ProcessExited:
            tries -= 1
            if port is not None or not tries or PORT_TAKEN not in process.log_text():
                raise


# What the server says when its address is taken (relaydesk/run.py).
PORT_TAKEN = "Address already in use"
READY_TIMEOUT_S = 30.0


async def _ready(server: ServerProcess) -> ServerProcess:
    """``server`` once ``/readyz`` answers; the error names its exit or the wait, with its log."""
    process = server.process

    async def ready() -> bool:
        if await asyncio.to_thread(server.relays_connected) >= 0:
            return True
        if not process.is_alive():
            raise process.not_ready("/readyz answering", scaled(READY_TIMEOUT_S))
        return False

    try:
        await wait_until(ready, READY_TIMEOUT_S, "the server to be ready")
    except AssertionError:
        raise process.not_ready("/readyz answering", scaled(READY_TIMEOUT_S)) from None
    return server


async def seed_action(url: str, seed: Seed, name: str, **args: Any) -> dict[str, Any]:
    """``POST /api/v1/actions/{name}`` in the seed's conversation as its user; must answer 200."""
    body = {"conversation_id": seed.conversation_id, **args}
    headers = {"Authorization": f"Bearer {seed.api_token}"}
    async with httpx.AsyncClient(base_url=url, timeout=scaled(40)) as client:
        response = await client.post(f"/api/v1/actions/{name}", json=body, headers=headers)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


def start_relay(
    factory: ProcessFactory,
    seed: Seed,
    server_url: str,
    token: str | None = None,
    *,
    name: str = "relay",
    extra_args: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> ManagedProcess:
    token_file = seed.data_dir / f"{name}.token"
    fd = os.open(token_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(token if token is not None else seed.relay_token)
    argv = relaydesk_argv("relay", "--server", server_url, "--token-file", str(token_file))
    full_env = {**seed.env(), **(env or {})}
    RELAY_STATE_DIRS.add(Path(full_env["RELAYDESK_STATE_DIR"]))
    seed.use_relay_authority()
    return factory([*argv, *extra_args], name=name, env=full_env)


def reap_desktops() -> int:
    """Stop every desktop a test relay left behind (relays killed with SIGKILL leave them).

    Desktops run in their own process groups, so killing a relay's group does not reach them;
    the relay's own state file says which they are, and the desktop manager stops exactly those.
    """
    count = 0
    for state_dir in sorted(RELAY_STATE_DIRS):
        count += asyncio.run(stop_desktops_in(state_dir))
    RELAY_STATE_DIRS.clear()
    return count


async def stop_desktops_in(state_dir: Path) -> int:
    """Stop the desktops recorded in a relay's state dir, the way the relay itself would
    (terminate, then kill, then free x11vnc's shared memory); return how many ran."""
    from relay.desktops import DesktopSettings, process_desktops

    if not (state_dir / "desktops.json").exists():
        return 0
    manager = process_desktops(DesktopSettings.from_env(environ={}, state_dir=state_dir))
    adopted = await manager.adopt()
    await manager.close(stop_desktops=True)
    return len(adopted)


async def person_headers(url: str, seed: Seed) -> dict[str, str]:
    """The seeded user signed in to the web app at ``url``: her session cookie and CSRF token
    (what take control, hand back and Stop need: they are for people, not API tokens)."""
    body = {"username": seed.user["username"], "password": seed.user["password"]}
    async with httpx.AsyncClient(base_url=url, timeout=scaled(30)) as client:
        login = await client.post("/api/v1/login", json=body)
    assert login.status_code == 200, login.text
    return {
        "Cookie": f"relaydesk_session={login.cookies['relaydesk_session']}",
        "X-CSRF-Token": login.json()["csrf_token"],
    }


@contextlib.asynccontextmanager
async def inprocess_server(seed: Seed, **overrides: Any) -> AsyncIterator[tuple[Any, str]]:
    """The real server app under uvicorn, in this event loop, on a free loopback port."""
    port = free_port()
    settings = Settings(
        data_dir=seed.data_dir,
        database_url=seed.database_url,
        host="127.0.0.1",
        port=port,
        secret_key="test-secret-key",
        heartbeat_s=1.0,
        liveness_timeout_s=3.0,
        **overrides,
    )
    app = create_app(settings)
    server = uvicorn.Server(uvicorn_config(app, settings))
    task = asyncio.create_task(server.serve())
    await wait_until(lambda: server.started, 30, "the in-process server to start")
    try:
        yield app, f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, scaled(15))
