"""``relaydesk up``: the whole system on one machine, in two child processes."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from relay.config import DIRECT_HOST_ENV
from relaydesk.run import bind_socket
from server import admin
from server.config import Settings
from server.db.errors import DatabaseInUse
from server.db.lock import lock_for
from server.db.migrate import upgrade
from server.db.store import Store

READY_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 15.0


async def _bootstrap(settings: Settings) -> dict[str, Any]:
    await upgrade(settings.database_url)
    store = await Store.open(settings.database_url)
    try:
        return await admin.bootstrap_all_in_one(store, login_link_ttl_s=settings.login_link_ttl_s)
    finally:
        await store.close()


def _write_secret(path: Path, secret: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(secret)


def _spawn(args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "relaydesk", *args], env=env)


def _wait_ready(url: str, server: subprocess.Popen[bytes]) -> bool:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline and server.poll() is None:
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
    """Bootstrap, start server and relay, print the login link, wait for Ctrl-C."""
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
    info = asyncio.run(_bootstrap(settings))
    token_file = settings.data_dir / "relay.token"
    _write_secret(token_file, info["relay_token"])
    env = {
        **os.environ,
        "RELAYDESK_DATA_DIR": str(settings.data_dir),
        "RELAYDESK_MIGRATE_ON_START": "0",
    }
    url = f"http://{'127.0.0.1' if host in {'0.0.0.0', '::'} else host}:{port}"
    print(f"==> starting the server on {host}:{port}", file=sys.stderr)
    server = _spawn(["server", "--host", host, "--port", str(port)], env)
    relay: subprocess.Popen[bytes] | None = None
    try:
        if not _wait_ready(url, server):
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
        return _wait_for_exit(server, relay)
    finally:
        if relay is not None:
            _stop(relay, "relay")
        _stop(server, "server")


def _wait_for_exit(server: subprocess.Popen[bytes], relay: subprocess.Popen[bytes]) -> int:
    stop = False

    def on_signal(signum: int, frame: Any) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    while not stop:
        if server.poll() is not None or relay.poll() is not None:
            print("relaydesk up: a child process exited; stopping", file=sys.stderr)
            return 1
        time.sleep(0.2)
    return 0
