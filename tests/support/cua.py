"""Cua's own client and server, run from .venv-cua (built by scripts/install), for the Cua
compatibility tests and benchmark.

:class:`CuaClient` drives ``tests/cua/cua_driver.py`` (Cua's ``Computer`` pointed at a base URL)
one request a line; :func:`start_cua_server` runs Cua's real ``computer_server`` on a display,
the oracle relaydesk's answers are compared with.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import queue
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx

from tests.support.processes import free_port, scaled

REPO_ROOT = Path(__file__).resolve().parents[2]
CUA_VENV = REPO_ROOT / ".venv-cua"
CUA_PYTHON = CUA_VENV / "bin" / "python"
DRIVER = REPO_ROOT / "tests" / "cua" / "cua_driver.py"
QUIET = {"CUA_TELEMETRY": "off", "DO_NOT_TRACK": "1"}


def require_cua_venv() -> Path:
    """The virtualenv's interpreter; a clear failure (never a skip) when it was not built."""
    if not CUA_PYTHON.exists():
        raise AssertionError(
            f"{CUA_VENV} is missing: scripts/install builds it (Cua's client needs Python >= 3.12)"
        )
    return CUA_PYTHON


class CuaClient:
    """Cua's ``Computer`` in its own process; :meth:`call` runs one interface method."""

    def __init__(self, base_url: str, token: str, mode: str = "bearer") -> None:
        env = {**os.environ, **QUIET, "RELAYDESK_API_TOKEN": token}
        self.process = subprocess.Popen(
            [str(require_cua_venv()), str(DRIVER), base_url, mode],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            start_new_session=True,
        )
        self._lines: queue.Queue[str] = queue.Queue()
        self._stderr: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()
        self.ready_s = 0.0

    @classmethod
    async def start(cls, base_url: str, token: str, mode: str = "bearer") -> CuaClient:
        """Cua's client, once its readiness sequence is done (it talks to a server that may
        run on the caller's event loop: every wait happens in a thread)."""
        client = cls(base_url, token, mode)
        ready = await asyncio.to_thread(client._next, scaled(60))
        if "ready" not in ready:
            client.close()
            raise RuntimeError(f"Cua's client did not get ready: {ready}")
        client.ready_s = float(ready["ready"])
        return client

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("{"):
                self._lines.put(line)

    def _read_stderr(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self._stderr.append(line)
            del self._stderr[:-200]

    @property
    def log(self) -> str:
        return "".join(self._stderr)

    def _next(self, timeout: float) -> dict[str, Any]:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            silent = f"Cua's client said nothing in {timeout:.0f} s:\n{self.log}"
            raise TimeoutError(silent) from None
        record: dict[str, Any] = json.loads(line)
        return record

    def _request(self, line: str) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()
        return self._next(scaled(60))

    async def request(self, method: str, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """One interface call; its record (``ok``, ``result`` or ``error``, ``seconds``)."""
        line = json.dumps({"method": method, "args": list(args), "kwargs": kwargs})
        return await asyncio.to_thread(self._request, line)

    async def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        record = await self.request(method, *args, **kwargs)
        assert record["ok"], f"{method}: {record.get('error')}\n{self.log[-2000:]}"
        return record["result"]

    async def image(self) -> bytes:
        return base64.b64decode((await self.call("screenshot"))["bytes_b64"])

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=scaled(15))
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, 9)
            self.process.wait(timeout=scaled(15))


class CuaServer:
    """Cua's real computer server on one display (the oracle), stopped by its process group."""

    def __init__(self, display: str, xauthority: str | None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, **QUIET, "DISPLAY": display}
        # Cua's server asks for its cloud's credentials whenever CONTAINER_NAME is set.
        env.pop("CONTAINER_NAME", None)
        if xauthority:
            env["XAUTHORITY"] = xauthority
        # Its output goes to a file, never a pipe nobody reads (a full pipe would stall it).
        self._log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - open until stop()
        self.process = subprocess.Popen(
            [
                str(require_cua_venv()),
                "-m",
                "computer_server",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--log-level",
                "warning",
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            start_new_session=True,
        )
        deadline = time.monotonic() + scaled(60)
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                output = self.output()
                self._log.close()
                raise RuntimeError(f"Cua's server exited: {output}")
            try:
                if httpx.get(f"{self.url}/status", timeout=scaled(2)).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.2)
        output = self.output()
        self.stop()
        raise TimeoutError(f"Cua's server did not answer /status: {output}")

    def output(self) -> str:
        """The end of what Cua's server wrote."""
        self._log.seek(0)
        return self._log.read()[-2000:]

    def cmd(self, command: str, **params: Any) -> dict[str, Any]:
        response = httpx.post(
            f"{self.url}/cmd", json={"command": command, "params": params}, timeout=scaled(30)
        )
        return parse_data_line(response.text)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, 15)
            try:
                self.process.wait(timeout=scaled(15))
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, 9)
                self.process.wait(timeout=scaled(15))
        self._log.close()


def parse_data_line(text: str) -> dict[str, Any]:
    """A ``/cmd`` answer (``data: {json}``) as Cua's client parses it."""
    text = text.strip()
    assert text.startswith("data: "), f"not a data line: {text[:200]!r}"
    reply: dict[str, Any] = json.loads(text[len("data: ") :])
    return reply


def shape(value: Any) -> Any:
    """Keys and types of a reply, recursively (what the oracle comparison compares)."""
    if isinstance(value, Mapping):
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return type(value).__name__
