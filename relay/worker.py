"""The relay worker: dial out, say hello, serve the server's requests, reconnect."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from typing import Any

import aiohttp
import psutil

from relay import __version__
from relay.config import RelaySettings
from relay.handlers import Handlers
from relay.link import ServerLink
from relay.wsframes import AiohttpFrames
from wire.connection import Connection, Role, WelcomeReceived
from wire.errors import CloseCode, ProtocolError
from wire.messages import PROTOCOL_VERSION, SUBPROTOCOL, Hello, Welcome

log = logging.getLogger(__name__)

WELCOME_TIMEOUT_S = 10.0
HANDSHAKE_TIMEOUT_S = 10.0
SILENT_HEARTBEATS = 3


def process_age_s() -> float:
    """Seconds since this process was started (interpreter start and imports included): the
    start-up timeline in the logs."""
    return time.time() - psutil.Process().create_time()


# How long a relay waits before it dials again, as a share of how long the server has been
# unreachable: a restarting server is redialled every ~0.2 s at first and a relay connects at
# most ~1/8 of the outage after the server is back; a server down for minutes is not
# hammered (the wait reaches backoff_max_s after 8 x backoff_max_s).
REDIAL_SHARE = 0.125


def redial_delay(
    outage_s: float, initial_s: float, max_s: float, jitter: float | None = None
) -> float:
    """Seconds before the next dial, ``outage_s`` into an outage (0 right after a connection
    closed): ``REDIAL_SHARE`` of the outage, at least ``initial_s``, at most ``max_s``; then
    ``jitter`` (drawn at random when None, in [0, 1]) takes up to half of it off, so the relays
    of a restarted server do not all dial in step."""
    base = min(max_s, max(initial_s, outage_s * REDIAL_SHARE))
    return base * (1.0 - 0.5 * (random.random() if jitter is None else jitter))


class RelayWorker:
    """Keeps one outbound connection to the server alive and serves it."""

    def __init__(self, settings: RelaySettings, handlers: Handlers) -> None:
        self.settings = settings
        self.handlers = handlers
        self.link: ServerLink | None = None
        self.connected = asyncio.Event()
        self._stopping = asyncio.Event()
        self.replaced = False
        # Set when the server's answer shows a configuration error (wrong URL, refused
        # token): retrying cannot help, so the relay logs it once and stops.
        self.config_error: str | None = None
        self._serving = False  # this attempt got its welcome: a stop now closes, not cancels
        self._dialled = 0.0  # when the current attempt began (monotonic), for the logs

    def stop(self) -> None:
        self._stopping.set()

    async def send_event(self, name: str, data: dict[str, Any]) -> None:
        """Tell the server something happened (dropped while disconnected: hello resyncs)."""
        if self.link is not None:
            try:
                await self.link.send_event(name, data)
            except (ConnectionError, ProtocolError, aiohttp.ClientError) as err:
                log.info("event %s not delivered: %s", name, err)

    async def run(self) -> None:
        """Connect, serve, and reconnect: soon at first, then less often the longer the server
        stays unreachable (:func:`redial_delay`)."""
        unreachable_since = time.monotonic()
        async with aiohttp.ClientSession() as session:
            while not self._stopping.is_set():
                welcomed = await self._attempt(session)
                now = time.monotonic()
                if welcomed:
                    unreachable_since = now
                if not self._stopping.is_set():
                    await self._wait_backoff(now - unreachable_since)

    async def _attempt(self, session: aiohttp.ClientSession) -> bool:
        """One connection. A stop while it is still dialling or in the handshake cancels it (a
        dial to a server that never answers can wait for minutes); once it serves, it closes
        the connection itself (:meth:`_close_when_stopping`)."""
        self._serving = False
        attempt = asyncio.create_task(self._connect_once(session), name="relay-connection")
        stopping = asyncio.create_task(self._stopping.wait(), name="relay-stopping")
        try:
            await asyncio.wait({attempt, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if not attempt.done() and not self._serving:
                log.info("stopping while connecting: giving up the connection attempt")
                attempt.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await attempt
                return False
            return await attempt
        finally:
            stopping.cancel()

    async def _wait_backoff(self, outage_s: float) -> None:
        settings = self.settings
        delay = redial_delay(outage_s, settings.backoff_initial_s, settings.backoff_max_s)
        log.info("reconnecting in %.2f s", delay)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), delay)

    async def _connect_once(self, session: aiohttp.ClientSession) -> bool:
        self._dialled = time.monotonic()
        headers = {"Authorization": f"Bearer {self.settings.token}"}
        try:
            # The upgrade gets its own time limit: on a half-open path its answer never comes
            # (aiohttp's default would wait five minutes).
            dial = session.ws_connect(
                self.settings.connect_url,
                headers=headers,
                protocols=(SUBPROTOCOL,),
                # Liveness comes from the server's pings (see _serve): any frame, a ping
                # included, resets the receive timeout. aiohttp's own heartbeat would allow a
                # pong only half a ping interval, which a busy server can miss without being
                # dead.
                timeout=aiohttp.ClientWSTimeout(ws_close=10.0),
                max_msg_size=self.settings.max_text + 16,
                # No permessage-deflate: VNC updates are mostly compressed already, and
                # deflating every channel byte costs more CPU than the link saves.
                compress=0,
            )
            async with asyncio.timeout(HANDSHAKE_TIMEOUT_S):
                ws = await dial
            async with ws:
                return await self._serve(ws)
        except TimeoutError:
            log.warning("the server at %s fell silent; redialling", self.settings.server_url)
            return False
        except (aiohttp.ClientError, OSError) as err:
            if problem := configuration_problem(err, self.settings):
                self._give_up(problem)
            else:
                log.warning("cannot reach the server at %s: %s", self.settings.server_url, err)
            return False
        except ProtocolError as err:
            log.error("server broke the protocol: %s", err.message)
            return False

    async def _serve(self, ws: aiohttp.ClientWebSocketResponse) -> bool:
        connection = Connection(
            Role.RELAY, max_text=self.settings.max_text, max_payload=self.settings.max_frame
        )
        connection.send_hello(await self._hello())
        link = ServerLink(
            connection,
            _sender(ws),
            self.handlers.dispatch,
            self.settings.max_concurrency,
            AiohttpFrames.of(ws),
        )
        await link.flush()
        welcome = await self._await_welcome(ws, connection)
        if welcome is None:
            return False
        # The server pings every heartbeat: silence for several of them means it is gone,
        # whatever this relay was configured with.
        silence_s = max(self.settings.liveness_timeout_s, SILENT_HEARTBEATS * welcome.heartbeat_s)
        self._serving = True
        self.link = link
        self.connected.set()
        log.info(
            "connected to %s",
            self.settings.server_url,
            extra={
                "dial_s": round(time.monotonic() - self._dialled, 3),
                "since_exec_s": round(process_age_s(), 3),
            },
        )
        # Told to stop (SIGTERM): close the connection, which ends the receive loop below.
        closer = asyncio.create_task(self._close_when_stopping(ws), name="close-on-stop")
        try:
            while (events := _receive(connection, await ws.receive(silence_s))) is not None:
                await link.handle(events)
        except ProtocolError as err:
            log.error("server broke the protocol: %s", err.message)
            await ws.close(code=err.close_code, message=err.message.encode()[:120])
        finally:
            closer.cancel()
            self.connected.clear()
            self.link = None
            await link.shutdown("disconnected")
        self._after_close(ws)
        return True

    async def _close_when_stopping(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        await self._stopping.wait()
        log.info("stopping: closing the connection to the server")
        await ws.close(code=CloseCode.GOING_AWAY, message=b"relay stopping")

    async def _hello(self) -> Hello:
        return Hello(
            protocol=PROTOCOL_VERSION,
            relay_version=__version__,
            capabilities=tuple(self.handlers.capabilities()),
            desktops=tuple(dict(row) for row in await self.handlers.desktop_rows()),
            max_frame=self.settings.max_frame,
            max_text=self.settings.max_text,
        )

    async def _await_welcome(
        self, ws: aiohttp.ClientWebSocketResponse, connection: Connection
    ) -> Welcome | None:
        async with asyncio.timeout(WELCOME_TIMEOUT_S):
            message = await ws.receive()
        events = _receive(connection, message)
        if events and isinstance(events[0], WelcomeReceived):
            return events[0].welcome
        self._after_close(ws)
        return None

    def _give_up(self, problem: str) -> None:
        log.error("%s", problem)
        self.config_error = problem
        self._stopping.set()

    def _after_close(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        code = ws.close_code
        if code == CloseCode.UNAUTHORIZED:
            self._give_up(
                f"the server refused this relay's token (from {self.settings.token_source}): "
                "unknown, rotated or revoked; put a current token there "
                "(relaydesk admin rotate-relay-token RELAY prints one) and start the relay again"
            )
        elif code == CloseCode.REPLACED:
            # Only another process holding the same token can replace a live connection:
            # reconnecting would make the two fight, so this one steps aside.
            log.error("another relay process connected with this token; this one stops")
            self.replaced = True
            self._stopping.set()
        elif self._stopping.is_set():
            log.info("closed the connection to the server")
        else:
            log.info("disconnected from the server (close code %s)", code)


# Answers to the WebSocket upgrade that waiting does not change (a proxy's 502/503 does).
_CONFIG_STATUSES = frozenset({400, 401, 403, 404, 405, 410, 426})


def configuration_problem(err: BaseException, config: RelaySettings) -> str | None:
    """What is wrong with the relay's configuration if ``err`` shows it; None for errors of
    the network or of a server that is down, which are worth retrying."""
    url = config.server_url
    if isinstance(err, aiohttp.ClientSSLError):
        return (
            f"TLS with the server at {url} failed ({getattr(err, 'strerror', None) or err}): "
            "if it serves plain HTTP, use http:// in --server"
        )
    if isinstance(err, aiohttp.WSServerHandshakeError) and err.status in _CONFIG_STATUSES:
        return (
            f"{config.connect_url} answered HTTP {err.status} instead of the relay endpoint: "
            "--server takes the relaydesk server's base URL (the one its web UI is served on), "
            "with the scheme it serves (http:// or https://)"
        )
    if isinstance(err, aiohttp.InvalidURL):
        return f"--server {url!r} is not a URL the relay can dial"
    return None


def _sender(ws: aiohttp.ClientWebSocketResponse) -> Any:
    async def send(frame: str | bytes) -> None:
        if isinstance(frame, str):
            await ws.send_str(frame)
        else:
            await ws.send_bytes(frame)

    return send


def _receive(connection: Connection, message: aiohttp.WSMessage) -> list[Any] | None:
    if message.type == aiohttp.WSMsgType.TEXT:
        return list(connection.receive_text(message.data))
    if message.type == aiohttp.WSMsgType.BINARY:
        return list(connection.receive_bytes(message.data))
    return None
