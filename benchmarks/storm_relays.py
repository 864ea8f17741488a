"""Simulated relays for ``bench_replica_storm``: many real ``wire`` connections in one process.

Each simulated relay behaves as ``relay/worker.py`` does on the wire: it dials
``/relay/v1/connect`` with its own token, says ``hello`` (``session_identity`` and one running
desktop), waits for ``welcome`` under the relay's time limits, answers the server's pings and
requests (``desktop.status``, ``ping``), and when the connection ends it dials again after the
relay's own backoff (:func:`relay.worker.redial_delay`, same initial and maximum waits). A
close with ``replaced`` or ``unauthorized`` ends it, as it ends a real relay.

A worker process runs a share of the fleet; the bench drives it through JSON lines on its
stdin (``go``, ``stats``, ``stop``) and reads one JSON line per command on its stdout
(:class:`FleetWorkers` is that driver).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict, cast

import aiohttp
import psutil

from relay.config import RelaySettings
from relay.worker import HANDSHAKE_TIMEOUT_S, SILENT_HEARTBEATS, WELCOME_TIMEOUT_S, redial_delay
from wire import ops
from wire.connection import Connection, RequestReceived, Role, WelcomeReceived
from wire.errors import CloseCode, ErrorCode, OpError, ProtocolError
from wire.messages import PROTOCOL_VERSION, SUBPROTOCOL, Hello

BACKOFF_INITIAL_S = RelaySettings.backoff_initial_s
BACKOFF_MAX_S = RelaySettings.backoff_max_s
LIVENESS_TIMEOUT_S = RelaySettings.liveness_timeout_s
# Close codes after which a real relay stops instead of redialling.
FINAL_CLOSES = frozenset({CloseCode.REPLACED, CloseCode.UNAUTHORIZED})
# Who may dial now: a semaphore while the fleet first comes online, nobody after that.
Gate = contextlib.AbstractAsyncContextManager[Any]
NO_GATE: Gate = contextlib.nullcontext()


class RelaySpec(TypedDict):
    """One simulated relay: its token and the session id of the desktop it reports."""

    token: str
    desktop_session_id: str


class Stats(TypedDict):
    """What a worker answers to ``stats``."""

    relays: int
    connected: int
    welcomes: int
    first_welcome_at: float  # time.monotonic(), comparable across processes on Linux
    last_welcome_at: float
    dial_failures: int
    stopped: int
    cpu_s: float


@dataclass
class Counters:
    relays: int
    connected: int = 0
    welcomes: int = 0
    first_welcome_at: float = 0.0
    last_welcome_at: float = 0.0
    dial_failures: int = 0
    stopped: int = 0

    def welcomed(self) -> None:
        now = time.monotonic()
        self.connected += 1
        self.welcomes += 1
        self.first_welcome_at = self.first_welcome_at or now
        self.last_welcome_at = now

    def stats(self) -> Stats:
        cpu = psutil.Process().cpu_times()
        return Stats(
            relays=self.relays,
            connected=self.connected,
            welcomes=self.welcomes,
            first_welcome_at=self.first_welcome_at,
            last_welcome_at=self.last_welcome_at,
            dial_failures=self.dial_failures,
            stopped=self.stopped,
            cpu_s=cpu.user + cpu.system,
        )


def _desktop_row(session_id: str) -> dict[str, Any]:
    return {
        "desktop_session_id": session_id,
        "kind": "virtual",
        "slot": "main",
        "state": "running",
        "started_by": "storm",
        "geometry": "1280x800",
    }


class SimulatedRelay:
    """One relay's connection loop: dial, hello, serve, redial after the relay's backoff."""

    def __init__(self, url: str, spec: RelaySpec, counters: Counters) -> None:
        self.url = url
        self.spec = spec
        self.counters = counters
        self.desktop = _desktop_row(spec["desktop_session_id"])
        self.hello = Hello(PROTOCOL_VERSION, "storm", ("session_identity",), (self.desktop,))
        self.close_code: int | None = None

    async def run(self, session: aiohttp.ClientSession, first_dial: Gate) -> None:
        """Connect and stay connected until a final close; the first welcome waits its turn
        at ``first_dial`` (the fleet coming online), redials after that do not (a storm)."""
        gate = first_dial
        unreachable_since = time.monotonic()
        while self.close_code not in FINAL_CLOSES:
            if await self._attempt(session, gate):
                gate, unreachable_since = NO_GATE, time.monotonic()
            if self.close_code not in FINAL_CLOSES:
                outage_s = time.monotonic() - unreachable_since
                await asyncio.sleep(redial_delay(outage_s, BACKOFF_INITIAL_S, BACKOFF_MAX_S))
        self.counters.stopped += 1

    async def _attempt(self, session: aiohttp.ClientSession, gate: Gate) -> bool:
        """One connection; True once it was welcomed (and has ended since)."""
        connection = Connection(Role.RELAY)
        try:
            async with gate:
                opened = await self._open(session, connection)
        except (TimeoutError, aiohttp.ClientError, OSError, ProtocolError):
            opened = None
        if opened is None:
            self.counters.dial_failures += 1
            return False
        ws, silence_s = opened
        self.counters.welcomed()
        try:
            async with ws:
                await self._answer_until_closed(ws, connection, silence_s)
        except (aiohttp.ClientError, OSError, ProtocolError):
            pass  # the connection broke: redial, as a relay does
        finally:
            self.counters.connected -= 1
            self.close_code = ws.close_code
        return True

    async def _open(
        self, session: aiohttp.ClientSession, connection: Connection
    ) -> tuple[aiohttp.ClientWebSocketResponse, float] | None:
        """Dial, say hello and wait for the welcome under the relay's time limits; the open
        socket and how long the server may stay silent, or None (refused, closed)."""
        async with asyncio.timeout(HANDSHAKE_TIMEOUT_S):
            ws = await session.ws_connect(
                self.url,
                headers={"Authorization": f"Bearer {self.spec['token']}"},
                protocols=(SUBPROTOCOL,),
                compress=0,
                timeout=aiohttp.ClientWSTimeout(ws_close=10.0),
            )
        try:
            connection.send_hello(self.hello)
            await _flush(ws, connection)
            async with asyncio.timeout(WELCOME_TIMEOUT_S):
                message = await ws.receive()
            if message.type is aiohttp.WSMsgType.TEXT:
                events = connection.receive_text(message.data)
                if events and isinstance(events[0], WelcomeReceived):
                    heartbeat_s = events[0].welcome.heartbeat_s
                    return ws, max(LIVENESS_TIMEOUT_S, SILENT_HEARTBEATS * heartbeat_s)
        except BaseException:
            await ws.close()
            raise
        self.close_code = ws.close_code
        await ws.close()
        return None

    async def _answer_until_closed(
        self, ws: aiohttp.ClientWebSocketResponse, connection: Connection, silence_s: float
    ) -> None:
        with contextlib.suppress(TimeoutError):  # the server fell silent: redial
            while (message := await ws.receive(silence_s)).type is aiohttp.WSMsgType.TEXT:
                for event in connection.receive_text(message.data):
                    if isinstance(event, RequestReceived):
                        self._answer(connection, event)
                await _flush(ws, connection)

    def _answer(self, connection: Connection, event: RequestReceived) -> None:
        request = event.request
        if request.op == ops.DESKTOP_STATUS.name:
            connection.send_result(request.id, {"desktops": [self.desktop]})
        elif request.op == ops.PING.name:
            connection.send_result(request.id, {"echo": request.args.get("echo")})
        else:
            message = f"a simulated relay does not do {request.op[:64]!r}"
            connection.send_error(request.id, OpError(ErrorCode.UNKNOWN_OP, message))


async def _flush(ws: aiohttp.ClientWebSocketResponse, connection: Connection) -> None:
    for frame in connection.data_to_send():
        await ws.send_str(str(frame))


# -- the worker process ------------------------------------------------------------------------


async def _commands() -> asyncio.StreamReader:
    reader = asyncio.StreamReader()
    loop = asyncio.get_running_loop()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    return reader


def _answer_line(data: dict[str, Any] | Stats) -> None:
    sys.stdout.write(json.dumps(data) + "\n")
    sys.stdout.flush()


async def serve_worker(url: str, specs: list[RelaySpec]) -> None:
    """Run ``specs`` as relays against ``url`` as the bench commands (stdin → stdout)."""
    counters = Counters(len(specs))
    commands = await _commands()
    tasks: list[asyncio.Task[None]] = []
    connector = aiohttp.TCPConnector(limit=0, force_close=True)
    async with aiohttp.ClientSession(connector=connector) as session:
        _answer_line({"ready": True})
        while line := await commands.readline():
            command = json.loads(line)
            if command["cmd"] == "go":
                gate = asyncio.Semaphore(int(command["concurrency"]))
                relays = [SimulatedRelay(url, spec, counters) for spec in specs]
                tasks = [asyncio.create_task(r.run(session, gate)) for r in relays]
                _answer_line({"started": len(tasks)})
            elif command["cmd"] == "stats":
                _answer_line(counters.stats())
            else:
                break
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    _answer_line({"stopped": True})


def worker_main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="a share of the simulated relay fleet")
    p.add_argument("--url", required=True, help="ws://…/relay/v1/connect")
    p.add_argument("--specs", required=True, type=Path, help="JSON list of RelaySpec")
    args = p.parse_args(argv)
    specs: list[RelaySpec] = json.loads(args.specs.read_text())
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the bench stops its workers itself
    import uvloop

    uvloop.run(serve_worker(args.url, specs))
    return 0


# -- the bench's side --------------------------------------------------------------------------


class FleetWorkers:
    """The worker processes of a fleet, each started in its own process group."""

    def __init__(self, url: str, specs: list[RelaySpec], workers: int, root: Path) -> None:
        self.url = url
        self.shares = [specs[i::workers] for i in range(workers)]
        self.root = root
        self.processes: list[asyncio.subprocess.Process] = []

    async def start(self) -> None:
        for n, share in enumerate(self.shares):
            path = self.root / f"relays-{n}.json"
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as handle:
                json.dump(share, handle)
            self.processes.append(
                await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "benchmarks.storm_relays",
                    "--url",
                    self.url,
                    "--specs",
                    str(path),
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                    start_new_session=True,
                )
            )
        await self._all({"cmd": "ready"}, send=False)

    async def go(self, concurrency: int) -> float:
        """Start every relay dialling; returns when they were told (monotonic)."""
        share = max(1, concurrency // len(self.processes))
        started = time.monotonic()
        await self._all({"cmd": "go", "concurrency": share})
        return started

    async def stats(self) -> list[Stats]:
        answers = await self._all({"cmd": "stats"})
        return [cast("Stats", answer) for answer in answers]

    async def stop(self, timeout_s: float = 20.0) -> None:
        """Close every relay, then end the workers (killed if they do not end in time)."""
        with contextlib.suppress(OSError, TimeoutError, ValueError):
            async with asyncio.timeout(timeout_s):
                await self._all({"cmd": "stop"})
        for process in self.processes:
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
            await process.wait()

    def pids(self) -> list[int]:
        return [p.pid for p in self.processes]

    async def _all(self, command: dict[str, Any], send: bool = True) -> list[dict[str, Any]]:
        if send:
            for process in self.processes:
                assert process.stdin is not None
                process.stdin.write((json.dumps(command) + "\n").encode())
                await process.stdin.drain()
        return [await self._answer(process, command["cmd"]) for process in self.processes]

    async def _answer(self, process: asyncio.subprocess.Process, what: str) -> dict[str, Any]:
        assert process.stdout is not None
        async with asyncio.timeout(60):
            line = await process.stdout.readline()
        if not line:
            raise RuntimeError(f"a relay worker ended before answering {what!r}")
        answer: dict[str, Any] = json.loads(line)
        return answer


if __name__ == "__main__":
    sys.exit(worker_main())
