"""The calling side of the replica link: a request or a channel sent to the replica that owns a
relay, or a screen call sent to the replica that issued its revision
(``server.cluster.screen``).

Each other replica is reached through one persistent WebSocket (``server.cluster.channel``),
opened on first use with an upgrade signed with the cluster secret for that replica's address
(``server.cluster.signing``) and kept: this side plays
the server's part of the relay protocol (it welcomes the answering replica's ``hello``, then
sends requests and opens channels), so a forwarded request costs one message each way and a
forwarded channel has the relay protocol's credit window and bounded buffer on this hop too.
A link that closes fails what was waiting on it with "not owner"; the next call opens a new one.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, ClassVar, Final

import aiohttp

from server.cluster.channel import (
    HOP_MARGIN_S,
    LINK_PATH,
    LINK_REPLICA,
    NOT_OWNER,
    RELAY_CHANNEL,
    RELAY_REQUEST,
    SCREEN_CALL,
    NotOwner,
    is_not_owner,
    relay_call,
)
from server.cluster.ownership import Owner
from server.cluster.signing import ClusterSigner
from server.relays.channel import ServerChannel, open_channel
from wire.connection import Connection, HelloReceived, Role
from wire.errors import ErrorCode, OpError, ProtocolError, RequestTimeout
from wire.ids import RelayId
from wire.link import Link
from wire.messages import Request, Welcome

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S: Final = 3.0
_REFUSED: Final = "a replica refused this replica's cluster signature"
# A link whose peer answers no ping within half of this is closed (a host that vanished).
LINK_HEARTBEAT_S: Final = 10.0
# Room beyond the relay's own largest message for the answer that carries it.
ANSWER_MARGIN: Final = 64 * 1024


async def _no_requests(request: Request) -> Any:
    raise OpError(ErrorCode.UNKNOWN_OP, "a replica link's answering side sends no requests")


class ReplicaLink(Link):
    """One open link to another replica."""

    peer: ClassVar[str] = "replica"

    def __init__(
        self, replica: str, ws: aiohttp.ClientWebSocketResponse, connection: Connection
    ) -> None:
        super().__init__(connection, self._write, on_request=_no_requests, max_concurrency=1)
        self.replica = replica
        self._ws = ws
        self._reader: asyncio.Task[None] | None = None

    def gone_error(self, reason: str) -> OpError:
        return OpError(
            ErrorCode.RELAY_UNREACHABLE, f"replica {self.replica} {reason}", {NOT_OWNER: True}
        )

    async def _write(self, frame: str | bytes) -> None:
        """A frame that cannot be written ends the link: what waited on it fails then."""
        try:
            if isinstance(frame, str):
                await self._ws.send_str(frame)
            else:
                await self._ws.send_bytes(frame)
        except (aiohttp.ClientError, OSError) as err:
            log.info("link to replica %s: %s", self.replica, err)
            await self._ws.close()

    def start(self) -> None:
        self._reader = asyncio.create_task(self._read(), name=f"replica-link-{self.replica}")

    async def _read(self) -> None:
        reason = "closed"
        try:
            async for message in self._ws:
                if message.type is aiohttp.WSMsgType.TEXT:
                    await self.handle(self.connection.receive_text(message.data))
                elif message.type is aiohttp.WSMsgType.BINARY:
                    await self.handle(self.connection.receive_bytes(message.data))
                elif message.type is aiohttp.WSMsgType.ERROR:
                    reason = f"failed: {message.data}"
                    break
        except ProtocolError as err:
            reason = f"broke the protocol: {err.message}"
            await self._ws.close(code=err.close_code, message=err.message[:120].encode())
        finally:
            log.info("link to replica %s %s", self.replica, reason)
            await self.shutdown(reason, "replica gone")

    async def close(self) -> None:
        await self._ws.close()
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)


class Peers:
    """Links to the other replicas, by their internal address."""

    def __init__(
        self, signer: ClusterSigner, replica_id: str, *, max_text: int, max_frame: int
    ) -> None:
        self._signer = signer
        self._replica_id = replica_id
        self._max_text, self._max_frame = max_text + ANSWER_MARGIN, max_frame
        self._session: aiohttp.ClientSession | None = None
        self._links: dict[str, ReplicaLink] = {}
        self._opening: dict[str, asyncio.Lock] = {}

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        return self._session

    async def close(self) -> None:
        links, self._links = list(self._links.values()), {}
        for link in links:
            await link.close()
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def open_links(self) -> int:
        return sum(1 for link in self._links.values() if not link.closed.is_set())

    async def request(
        self, owner: Owner, op: str, args: dict[str, Any] | None, timeout_s: float
    ) -> Any:
        """Run ``op`` on ``owner``'s relay; raise :class:`NotOwner` or the relay's ``OpError``."""
        call = relay_call(owner, op=op, args=args, timeout_s=timeout_s)
        link = await self._link(owner.replica, owner.url)
        return await _ask(link, RELAY_REQUEST, call, timeout_s + HOP_MARGIN_S, op)

    async def screen(self, replica: str, url: str, call: dict[str, Any], total_s: float) -> Any:
        """Run a screen call on ``replica`` (at ``url``); raise :class:`NotOwner` when it cannot
        be reached, or the call's ``OpError``."""
        return await _ask(await self._link(replica, url), SCREEN_CALL, call, total_s, "screen")

    async def open_channel(
        self, owner: Owner, target: dict[str, Any], timeout_s: float
    ) -> ServerChannel:
        """Open a channel on ``owner``'s relay; raise :class:`NotOwner` or the relay's error."""
        link = await self._link(owner.replica, owner.url)
        call = relay_call(owner, target=target, timeout_s=timeout_s)
        try:
            return await open_channel(link, RELAY_CHANNEL, call, timeout_s + HOP_MARGIN_S)
        except RequestTimeout:
            raise OpError(ErrorCode.TIMEOUT, "channel.open did not answer") from None
        except OpError as err:
            if is_not_owner(err):
                raise NotOwner(err.message) from None
            raise

    async def _link(self, replica: str, url: str) -> ReplicaLink:
        link = self._links.get(url)
        if link is not None and not link.closed.is_set():
            return link
        async with self._opening.setdefault(url, asyncio.Lock()):
            link = self._links.get(url)
            if link is None or link.closed.is_set():
                link = self._links[url] = await self._connect(replica, url)
        return link

    async def _connect(self, replica: str, url: str) -> ReplicaLink:
        """Open, authenticate and welcome a link to ``replica``."""
        me = self._replica_id
        signed = self._signer.sign("GET", LINK_PATH, me.encode(), target=url)
        headers = {**signed, LINK_REPLICA: me}
        try:
            ws = await self._client().ws_connect(
                url + LINK_PATH,
                headers=headers,
                heartbeat=LINK_HEARTBEAT_S,
                max_msg_size=0,
                compress=0,
                timeout=aiohttp.ClientWSTimeout(ws_receive=None, ws_close=5.0),
            )
            hello = await ws.receive(timeout=CONNECT_TIMEOUT_S)
        except aiohttp.WSServerHandshakeError as err:
            if err.status == 403:
                raise OpError(ErrorCode.INTERNAL, _REFUSED) from None
            raise NotOwner(f"replica {replica} unreachable: {err}") from err
        except (aiohttp.ClientError, OSError, TimeoutError) as err:
            raise NotOwner(f"replica {replica} unreachable: {err or 'no answer'}") from err
        try:
            return await self._welcome(replica, ws, hello)
        except BaseException:
            await ws.close()
            raise

    async def _welcome(
        self, replica: str, ws: aiohttp.ClientWebSocketResponse, hello: aiohttp.WSMessage
    ) -> ReplicaLink:
        connection = Connection(Role.SERVER, max_text=self._max_text, max_payload=self._max_frame)
        try:
            if hello.type is not aiohttp.WSMsgType.TEXT:
                raise ProtocolError("no hello")
            (event,) = connection.receive_text(hello.data)
            assert isinstance(event, HelloReceived)
        except ProtocolError as err:
            raise NotOwner(f"replica {replica} link: {err.message}") from None
        connection.accept(
            Welcome(RelayId(replica), LINK_HEARTBEAT_S, self._max_frame, self._max_text)
        )
        link = ReplicaLink(replica, ws, connection)
        await link.flush()
        link.start()
        return link


async def _ask(link: ReplicaLink, op: str, call: dict[str, Any], total_s: float, what: str) -> Any:
    try:
        return await link.request(op, call, total_s)
    except RequestTimeout:
        raise OpError(ErrorCode.TIMEOUT, f"{what} did not answer through its replica") from None
    except OpError as err:
        if is_not_owner(err):
            raise NotOwner(err.message) from None
        raise
