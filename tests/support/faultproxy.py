"""A fault-injecting TCP proxy for tests: put it between a relay and the server.

Faults (set on ``proxy.fault``, changeable while connections run): ``latency_s`` added to
every chunk in each direction, ``bandwidth_bps`` per direction, ``blackhole`` (bytes are read
and silently dropped, connections stay open: a half-open path), ``slow_read_bytes`` (each
direction reads at most that many bytes per ``slow_read_pause_s``: a peer that reads slowly).
``reset()`` aborts every connection with a TCP RST.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from dataclasses import dataclass, field

from tests.support.processes import free_port

_CHUNK = 64 * 1024


@dataclass
class Fault:
    latency_s: float = 0.0
    bandwidth_bps: float = 0.0
    blackhole: bool = False
    slow_read_bytes: int = 0
    slow_read_pause_s: float = 0.01


@dataclass(eq=False)
class _Link:
    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter
    tasks: list[asyncio.Task[None]] = field(default_factory=list)


class FaultProxy:
    """Listens on ``127.0.0.1:port`` and forwards to ``upstream_port``."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = free_port()
        self.fault = Fault()
        self.accepted = 0
        self._links: set[_Link] = set()
        self._server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> FaultProxy:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.close()
        self.reset()
        for link in list(self._links):
            await _cancel(link.tasks)

    def reset(self) -> None:
        """Abort every open connection with RST (SO_LINGER 0)."""
        for link in list(self._links):
            for writer in (link.client, link.upstream):
                _abort(writer)
        self._links.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        except OSError:
            _abort(writer)
            return
        link = _Link(writer, up_writer)
        self._links.add(link)
        link.tasks = [
            asyncio.create_task(self._pump(reader, up_writer)),
            asyncio.create_task(self._pump(up_reader, writer)),
        ]
        await asyncio.wait(link.tasks, return_when=asyncio.FIRST_COMPLETED)
        self._links.discard(link)
        for w in (writer, up_writer):
            w.close()
        await _cancel(link.tasks)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while data := await reader.read(self.fault.slow_read_bytes or _CHUNK):
                await self._delay(len(data))
                if not self.fault.blackhole:
                    writer.write(data)
                    await writer.drain()

    async def _delay(self, size: int) -> None:
        fault = self.fault
        wait = fault.latency_s + (size / fault.bandwidth_bps if fault.bandwidth_bps else 0.0)
        if fault.slow_read_bytes:
            wait += fault.slow_read_pause_s
        if wait:
            await asyncio.sleep(wait)


def _abort(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def _cancel(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
