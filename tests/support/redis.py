"""A throw-away ``redis-server`` for the tests: a free loopback port, no persistence, a random
password (``requirepass``, from a 0600 file: never on a command line), carried in its URL.

Started on first use by the session fixture ``redis_url``, probed with ``PING`` until it
answers, and stopped by the pid we started. A missing ``redis-server`` fails the tests that need
it; it is never skipped.
"""

from __future__ import annotations

import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.processes import POLL_INTERVAL_S, free_port, scaled

START_TIMEOUT_S = 15.0


class RedisUnavailable(RuntimeError):
    """redis-server could not be found or started."""


@dataclass
class RedisServer:
    root: Path
    port: int
    process: subprocess.Popen[bytes] | None = None
    password: str = field(default_factory=lambda: secrets.token_hex(16), repr=False)

    @property
    def url(self) -> str:
        return f"redis://:{self.password}@127.0.0.1:{self.port}/0"

    def _config(self) -> Path:
        """The password in a file only this user reads (a command line is world-readable)."""
        path = self.root / "redis.conf"
        path.touch(mode=0o600)
        path.write_text(f"requirepass {self.password}\n")
        return path

    def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RedisUnavailable(
                "redis-server not found; install it with `apt-get install redis-server`"
            )
        where = ("--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.root))
        argv = [binary, str(self._config()), *where, "--save", "", "--appendonly", "no"]
        with (self.root / "redis.log").open("wb") as log:
            self.process = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                process_group=0,
            )
        deadline = time.monotonic() + scaled(START_TIMEOUT_S)
        while not self._answers_ping():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RedisUnavailable(f"redis-server did not answer PING:\n{self._log()}")
            time.sleep(POLL_INTERVAL_S)  # interval between probes, not a readiness guess

    def _answers_ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(f"AUTH {self.password}\r\nPING\r\n".encode())
                answer = b""
                while answer.count(b"\r\n") < 2 and (chunk := sock.recv(64)):
                    answer += chunk
                return answer == b"+OK\r\n+PONG\r\n"
        except OSError:
            return False

    def _log(self) -> str:
        try:
            return (self.root / "redis.log").read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def stop(self) -> None:
        """Stop exactly the server we started."""
        proc, self.process = self.process, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=scaled(10))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=scaled(10))


def start_redis() -> RedisServer:
    server = RedisServer(Path(tempfile.mkdtemp(prefix="relaydesk-redis-")), free_port())
    server.start()
    return server


_shared: list[RedisServer] = []


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """The session's throw-away Redis (started on first use)."""
    if not _shared:
        _shared.append(start_redis())
    yield _shared[0]
    if _shared:
        server = _shared.pop()
        server.stop()
        shutil.rmtree(server.root, ignore_errors=True)


@pytest.fixture(scope="session")
def redis_url(redis_server: RedisServer) -> str:
    return redis_server.url
