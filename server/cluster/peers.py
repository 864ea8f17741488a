"""The calling side of the internal channel: a request or a byte stream sent to the replica
that owns a relay, or a screen call sent to the replica that issued its revision
(``server.cluster.screen``), signed with the cluster secret (``server.cluster.signing``).

Requests reuse keep-alive HTTP connections; a byte stream is one internal WebSocket whose
both hops are bounded by TCP flow control (aiohttp pauses reading past its small queue, and
``send_bytes`` waits for the socket to drain), so a slow viewer stops the owner, which stops
reading the relay channel, which stops crediting the relay.
"""

from __future__ import annotations

import contextlib
from typing import Any, Final

import aiohttp
import orjson

from server.cluster.channel import (
    CHANNEL_CALL,
    CHANNEL_PATH,
    HOP_MARGIN_S,
    REQUEST_PATH,
    SCREEN_PATH,
    NotOwner,
    channel_code_from,
    close_code_for,
)
from server.cluster.ownership import Owner
from server.cluster.signing import ClusterSigner
from wire.errors import ChannelCloseCode, ChannelClosedError, ErrorCode, OpError
from wire.frames import Payload

CONNECT_TIMEOUT_S: Final = 3.0


class Peers:
    """Signed requests and channels to other replicas."""

    def __init__(self, signer: ClusterSigner) -> None:
        self._signer = signer
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=0, limit_per_host=64, keepalive_timeout=60)
            self._session = aiohttp.ClientSession(connector=connector)
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def request(
        self, owner: Owner, op: str, args: dict[str, Any] | None, timeout_s: float
    ) -> Any:
        """Run ``op`` on ``owner``'s link; raise :class:`NotOwner` or the relay's ``OpError``."""
        body = orjson.dumps(
            {
                "relay_id": owner.relay_id,
                "epoch": owner.epoch,
                "op": op,
                "args": args,
                "timeout_s": timeout_s,
            }
        )
        return await self._post(owner.replica, owner.url, REQUEST_PATH, body,
                                timeout_s + HOP_MARGIN_S, op)  # fmt: skip

    async def screen(self, replica: str, url: str, call: dict[str, Any], total_s: float) -> Any:
        """Run a screen call on ``replica`` (at ``url``); raise :class:`NotOwner` when it cannot
        be reached, or the call's ``OpError``."""
        return await self._post(replica, url, SCREEN_PATH, orjson.dumps(call), total_s, "screen")

    async def _post(
        self, replica: str, url: str, path: str, body: bytes, total_s: float, what: str
    ) -> Any:
        headers = self._signer.sign("POST", path, body)
        headers["content-type"] = "application/json"
        timeout = aiohttp.ClientTimeout(total=total_s, connect=CONNECT_TIMEOUT_S)
        try:
            async with self._client().post(
                url + path, data=body, headers=headers, timeout=timeout
            ) as response:
                status, raw = response.status, await response.read()
        except (aiohttp.ClientError, OSError) as err:
            raise NotOwner(f"replica {replica} unreachable: {err}") from err
        except TimeoutError:
            raise OpError(ErrorCode.TIMEOUT, f"{what} did not answer through its replica") from None
        return _answer(status, raw)

    async def open_channel(
        self, owner: Owner, target: dict[str, Any], timeout_s: float
    ) -> RemoteChannel:
        """Open a channel on ``owner``'s link; raise :class:`NotOwner` or the relay's error."""
        # The call travels in a header, signed as the body: a query string may be re-encoded.
        call = orjson.dumps(
            {
                "relay_id": owner.relay_id,
                "epoch": owner.epoch,
                "timeout_s": timeout_s,
                "target": target,
            }
        )
        headers = {**self._signer.sign("GET", CHANNEL_PATH, call), CHANNEL_CALL: call.decode()}
        try:
            ws = await self._client().ws_connect(
                owner.url + CHANNEL_PATH,
                headers=headers,
                timeout=aiohttp.ClientWSTimeout(ws_receive=None, ws_close=5.0),
                autoping=True,
                max_msg_size=0,
                compress=0,
            )
        except (aiohttp.ClientError, OSError) as err:
            raise NotOwner(f"replica {owner.replica} unreachable: {err}") from err
        try:
            opened = await ws.receive(timeout=timeout_s + HOP_MARGIN_S)
        except TimeoutError:
            await ws.close()
            raise OpError(ErrorCode.TIMEOUT, "channel.open did not answer") from None
        if opened.type is not aiohttp.WSMsgType.TEXT:
            await ws.close()
            raise NotOwner(f"replica {owner.replica} closed the channel before opening it")
        try:
            _answer(200, opened.data.encode())
        except BaseException:
            await ws.close()
            raise
        return RemoteChannel(ws)


def _answer(status: int, raw: bytes) -> Any:
    if status == 403:
        raise OpError(ErrorCode.INTERNAL, "a replica refused this replica's cluster signature")
    try:
        payload = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise OpError(ErrorCode.INTERNAL, f"a replica answered {status} without JSON") from None
    if payload.get("not_owner"):
        raise NotOwner("the replica does not hold the relay")
    error = payload.get("error")
    if isinstance(error, dict):
        raise OpError.from_dict(error)
    return payload.get("result")


class RemoteChannel:
    """A relay channel held by another replica, seen through an internal WebSocket."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self._ws = ws
        self._closed: ChannelClosedError | None = None

    async def read(self) -> Payload:
        if self._closed is not None:
            raise self._closed
        message = await self._ws.receive()
        if message.type is aiohttp.WSMsgType.BINARY:
            data: bytes = message.data
            return data
        code = self._ws.close_code
        reason = message.extra if isinstance(message.extra, str) else ""
        self._closed = ChannelClosedError(channel_code_from(code), reason or "relay gone")
        raise self._closed

    async def write(self, data: bytes) -> None:
        if self._closed is not None:
            raise self._closed
        try:
            await self._ws.send_bytes(data)
        except (aiohttp.ClientError, OSError, ConnectionResetError) as err:
            self._closed = ChannelClosedError(ChannelCloseCode.RELAY_GONE, "replica gone")
            raise self._closed from err

    async def close(
        self,
        code: ChannelCloseCode = ChannelCloseCode.NORMAL,
        reason: str = "",
        *,
        tell_peer: bool = True,
    ) -> None:
        if self._closed is None:
            self._closed = ChannelClosedError(code, reason)
        with contextlib.suppress(aiohttp.ClientError, OSError):
            await self._ws.close(code=close_code_for(code), message=reason[:120].encode())
