"""``relaydesk up``: the whole system on one machine, in two child processes."""

from __future__ import annotations

import asyncio
import ctypes
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from relay.config import DIRECT_HOST_ENV
from relaydesk import saved
from relaydesk.agent_settings import agent_settings
from relaydesk.run import bind_socket
from server import admin
from server.config import Settings
from server.db.errors import DatabaseInUse, StoreError
from server.db.lock import lock_for
from server.db.migrate import upgrade
from server.db.rows import DesktopRow
from server.db.store import Store

READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0
# The API token relaydesk up makes for agents (listed under this name by admin list-tokens).
AGENT_TOKEN_NAME = "relaydesk-up"  # noqa: S105 - a name, not a secret
PR_SET_PDEATHSIG = 1  # linux/prctl.h
LIVE_STATES: Final = ("starting", "running")


async def _bootstrap(settings: Settings, saved_token: str | None) -> dict[str, Any]:
    """The admin, conversation and relay (``server.admin.bootstrap_all_in_one``), and the
    agent's API token: the saved one while it still works, else a new one (``token_is_new``)."""
    await upgrade(settings.database_url)
    store = await Store.open(settings.database_url)
    try:
        info = await admin.bootstrap_all_in_one(store, login_link_ttl_s=settings.login_link_ttl_s)
        token = await _agent_token(store, info["user_id"], saved_token)
        return {**info, "api_token": token or "", "token_is_new": token is not None}
    finally:
        await store.close()


async def _agent_token(store: Store, admin_id: str, saved_token: str | None) -> str | None:
    """A new API token for the admin, or None when the saved one still lets the admin in."""
    if saved_token:
        user = await store.authenticate_api_token(saved_token)
        if user is not None and user.user_id == admin_id:
            return None
    name = admin.free_token_name(await admin.live_token_names(store, admin_id), AGENT_TOKEN_NAME)
    token, _record = await store.create_api_token(admin_id, name)
    return token


def _write_secret(path: Path, secret: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(secret)


def _spawn(args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    # Each child leads its own process group: Ctrl-C in the terminal reaches relaydesk up
    # alone, which stops the relay (and its desktops) before the server that records it.
    return subprocess.Popen(
        [sys.executable, "-m", "relaydesk", *args],
        env=env,
        preexec_fn=_child_of_up,  # up runs no threads of its own when it spawns
    )


def _child_of_up() -> None:
    """In the child, before exec: its own process group, and SIGTERM when up dies (even by
    SIGKILL), so no server or relay outlives it."""
    os.setpgid(0, 0)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _wait_ready(url: str, server: subprocess.Popen[bytes], stopping: _StopSignal) -> bool:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline and server.poll() is None and not stopping.asked:
        try:
            with urllib.request.urlopen(f"{url}/readyz", timeout=1) as response:  # noqa: S310
                if response.status == 200:
                    return True
        except (urllib.error.URLError, OSError):
            time.sleep(0.1)
    return False


def _stop(proc: subprocess.Popen[bytes], name: str) -> None:
    # Said also when the child stops by itself: Ctrl-C in a terminal reaches it too, and a
    # relay may be done before this runs.
    print(f"==> stopping {name}", file=sys.stderr)
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(STOP_TIMEOUT_S)


def run_up(host: str | None, port: int | None, *, keep_desktops: bool) -> int:
    """Bootstrap, start server and relay, print the login link and what an agent needs, wait
    for Ctrl-C, then stop the relay (and its desktops) before the server."""
    settings = Settings.from_env()
    host = host or settings.host
    port = port if port is not None else settings.port
    lock = lock_for(settings.database_url)
    try:
        if lock is not None:
            lock.check_free()  # the server takes it; nothing is touched while another runs
    except DatabaseInUse as err:
        print(f"relaydesk up: {err.message}", file=sys.stderr)
        return 1
    try:
        bind_socket(host, port).close()  # another server there would answer our readiness wait
    except OSError as err:
        print(
            f"relaydesk up: cannot serve on {host}:{port}: {err.strerror or err}", file=sys.stderr
        )
        return 1
    print(f"==> preparing the database in {settings.data_dir}", file=sys.stderr)
    last = saved.load(settings.data_dir)
    info = asyncio.run(_bootstrap(settings, last.api_token if last else None))
    token_file = settings.data_dir / "relay.token"
    _write_secret(token_file, info["relay_token"])
    url = f"http://{'127.0.0.1' if host in {'0.0.0.0', '::'} else host}:{port}"
    client = saved.SavedClient(
        server_url=url,
        api_token=info["api_token"] or (last.api_token if last else ""),
        conversation_id=info["conversation_id"],
        relay=info["relay_name"],
    )
    client_file = saved.save(client, settings.data_dir)
    env = {
        **os.environ,
        "RELAYDESK_DATA_DIR": str(settings.data_dir),
        "RELAYDESK_MIGRATE_ON_START": "0",
    }
    print(f"==> starting the server on {host}:{port}", file=sys.stderr)
    server = _spawn(["server", "--host", host, "--port", str(port)], env)
    relay: subprocess.Popen[bytes] | None = None
    stopping = _StopSignal()
    try:
        if not _wait_ready(url, server, stopping):
            if stopping.asked:
                return 0
            print(
                "relaydesk up: the server did not become ready; see its log above", file=sys.stderr
            )
            return 1
        print("==> starting the relay", file=sys.stderr)
        relay_args = ["relay", "--server", url, "--token-file", str(token_file)]
        relay_args += [] if keep_desktops else ["--stop-desktops-on-exit"]
        # The relay runs on the server's host: viewers take the direct path to its x11vnc
        # over loopback, with no relay channel. An explicit setting, even empty, wins.
        relay = _spawn(relay_args, {DIRECT_HOST_ENV: "127.0.0.1", **env})
        print(
            f"\nrelaydesk is up: {url}\none-time login link: {url}/login/{info['login_token']}\n",
            flush=True,
        )
        shown = client if info["token_is_new"] else None
        print(agent_settings(client, client_file, shown), flush=True)
        return stopping.wait(server, relay)
    finally:
        live = _live_desktops(settings, info["relay_id"]) if relay is not None else []
        if relay is not None:
            _stop(relay, "relay")
        _stop(server, "server")
        _report_desktops(settings, live, keep_desktops=keep_desktops)


class _StopSignal:
    """SIGINT or SIGTERM asks relaydesk up to stop (from here on; before, Ctrl-C interrupts)."""

    def __init__(self) -> None:
        self.asked = False
        signal.signal(signal.SIGTERM, self._ask)
        signal.signal(signal.SIGINT, self._ask)

    def _ask(self, signum: int, frame: Any) -> None:
        self.asked = True

    def wait(self, server: subprocess.Popen[bytes], relay: subprocess.Popen[bytes]) -> int:
        """Until asked to stop (0), or until a child exits by itself (1)."""
        while not self.asked:
            if server.poll() is not None or relay.poll() is not None:
                print("relaydesk up: a child process exited; stopping", file=sys.stderr)
                return 1
            time.sleep(0.2)
        return 0


def _live_desktops(settings: Settings, relay_id: str) -> list[DesktopRow]:
    """The relay's desktops the server counts as live, before the shutdown begins (none
    when the database cannot say: the shutdown goes on regardless)."""
    try:
        return asyncio.run(_rows(settings, relay_id, LIVE_STATES))
    except StoreError as err:
        print(f"relaydesk up: cannot list the desktops: {err.message}", file=sys.stderr)
        return []


async def _rows(
    settings: Settings, relay_id: str, states: Sequence[str] | None = None
) -> list[DesktopRow]:
    store = await Store.open(settings.database_url)
    try:
        return await store.desktops_for_relay(relay_id, states)
    finally:
        await store.close()


def _report_desktops(settings: Settings, live: list[DesktopRow], *, keep_desktops: bool) -> None:
    """Say what became of each desktop that was live when the shutdown began."""
    if not live:
        return
    try:
        rows = asyncio.run(_rows(settings, live[0].relay_id))
    except StoreError as err:
        print(f"relaydesk up: cannot list the desktops: {err.message}", file=sys.stderr)
        return
    now = {row.desktop_session_id: row for row in rows}
    for row in live:
        after = now.get(row.desktop_session_id, row)
        what = f"{row.kind} desktop in slot {row.slot} (session {row.desktop_session_id})"
        if after.state == "stopped":
            print(f"==> stopped the {what}", file=sys.stderr)
        elif keep_desktops:
            print(f"==> left the {what} running for the next relaydesk up", file=sys.stderr)
        else:
            print(f"relaydesk up: the {what} is {after.state}", file=sys.stderr)
