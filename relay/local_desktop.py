"""The relay's side of its host helper: ``local`` desktops (the relay host's real screen).

Set up when ``RELAYDESK_HOST_HELPER`` names the helper (``http://H:P``); every call carries
``RELAYDESK_HOST_HELPER_TOKEN``. The relay talks to the helper at exactly that address and
nothing else: a viewer channel is the helper's connect stream (a WebSocket the helper bridges to
its own loopback websockify), pumped into the wire channel like any TCP target.

At most one local desktop per relay (slot ``main``); its ``desktop_session_id`` is the helper's
``local_screen_session_id``. When the helper does not answer, ops fail with ``unavailable`` and
status reports the last known row as ``unknown`` until the helper answers again. A small poll
loop turns a helper-side failure or stop into ``desktop.changed``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final

import aiohttp

from relay.channels import TargetStream, TcpChannel
from relay.config import HOST_HELPER_TOKEN_ENV
from wire.errors import ChannelCloseCode, ErrorCode, InvalidArgs, OpError
from wire.ids import ChannelId

if TYPE_CHECKING:
    from relay.link import ServerLink

log = logging.getLogger(__name__)

HELPER_URL_ENV: Final = "RELAYDESK_HOST_HELPER"
LOCAL_KIND: Final = "local"
LOCAL_SLOT: Final = "main"
UNREACHABLE: Final = "host_helper_unreachable"
REQUEST_TIMEOUT_S = 20.0
POLL_INTERVAL_S = 2.0
READ_CHUNK = 256 * 1024
MAX_MESSAGE = 4 * 1024 * 1024
# Accepted from desktop.start; geometry and depth are the real screen's own and are ignored.
_START_ARGS = frozenset({"kind", "slot", "geometry", "depth", "audio", "started_by"})
KEYBOARD_STATE_KEYS = ("num_lock", "caps_lock", "scroll_lock", "source")

OnChange = Callable[[dict[str, Any]], Awaitable[None]]
OpHandler = Callable[["ServerLink", dict[str, Any]], Awaitable[Any]]


class HostHelperClient:
    """HTTP calls to the helper at its one advertised address, with the shared token."""

    def __init__(self, url: str, token: str, timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        self.url = url.rstrip("/")
        self._headers = {"Authorization": f"Bearer {token}"}
        self._timeout_s = timeout_s
        self._session: aiohttp.ClientSession | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            # trust_env=False: a proxy from the environment must never see the helper's token.
            self._session = aiohttp.ClientSession(trust_env=False)
        return self._session

    def unreachable_error(self, reason: str = "unreachable") -> OpError:
        return OpError(
            ErrorCode.UNAVAILABLE,
            f"the host helper at {self.url} does not answer ({reason}): is `relaydesk "
            "host-helper` running in the screen's session on this relay's host?",
            {"reason": UNREACHABLE},
        )

    def _unreachable(self, err: BaseException) -> OpError:
        reason = "timed out" if isinstance(err, TimeoutError) else type(err).__name__
        return self.unreachable_error(reason)

    async def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """One request; the helper's error body becomes the same ``OpError``."""
        try:
            async with (
                asyncio.timeout(self._timeout_s),
                self.session.request(
                    method, f"{self.url}{path}", json=body, headers=self._headers
                ) as resp,
            ):
                data = await resp.json(content_type=None)
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError) as err:
            raise self._unreachable(err) from err
        if resp.status == 401:
            raise OpError(
                ErrorCode.UNAVAILABLE,
                f"the host helper refused this relay's token; check {HOST_HELPER_TOKEN_ENV}",
            )
        if not isinstance(data, dict):
            raise OpError(ErrorCode.UNAVAILABLE, "the host helper answered without an object")
        if not data.get("ok"):
            raise OpError.from_dict(data.get("error") or {})
        return data

    async def connect(self, port: int) -> aiohttp.ClientWebSocketResponse:
        """The helper's connect stream for the local desktop's port."""
        try:
            async with asyncio.timeout(self._timeout_s):
                return await self.session.ws_connect(
                    f"{self.url}/v1/local/connect?port={port}",
                    headers=self._headers,
                    max_msg_size=MAX_MESSAGE,
                )
        except aiohttp.WSServerHandshakeError as err:
            raise OpError(
                ErrorCode.UNAVAILABLE, f"the host helper refused the stream (HTTP {err.status})"
            ) from err
        except (aiohttp.ClientError, OSError, TimeoutError) as err:
            raise self._unreachable(err) from err

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()


def _row(desktop: dict[str, Any]) -> dict[str, Any]:
    """A helper session → the relay's status row (no ``display``: not a relay display)."""
    return {
        "desktop_session_id": desktop["local_screen_session_id"],
        "kind": LOCAL_KIND,
        "slot": LOCAL_SLOT,
        "state": "running",
        "started_at": desktop.get("started_at"),
        "started_by": desktop.get("started_by"),
        "host_display": desktop.get("display"),
        "websockify_port": desktop.get("websockify_port"),
    }


async def _ws_to_stream(ws: aiohttp.ClientWebSocketResponse, writer: asyncio.StreamWriter) -> None:
    async for message in ws:
        if message.type != aiohttp.WSMsgType.BINARY:
            break
        writer.write(message.data)
        await writer.drain()


async def _stream_to_ws(reader: asyncio.StreamReader, ws: aiohttp.ClientWebSocketResponse) -> None:
    while data := await reader.read(READ_CHUNK):
        await ws.send_bytes(data)


async def bridge(
    ws: aiohttp.ClientWebSocketResponse, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """Pump the helper's stream and one end of a socket pair until either side ends."""
    pumps = [asyncio.create_task(_ws_to_stream(ws, writer)),
             asyncio.create_task(_stream_to_ws(reader, ws))]  # fmt: skip
    try:
        await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for pump in pumps:
            pump.cancel()
        for pump in pumps:
            with contextlib.suppress(asyncio.CancelledError, ConnectionError, OSError):
                await pump
        await ws.close()
        writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await writer.wait_closed()


class LocalDesktop:
    """Its desktop at the helper: ``desktop.*``, ``channel.open``, ``keyboard.state``, screen."""

    def __init__(
        self,
        client: HostHelperClient,
        on_change: OnChange | None = None,
        poll_interval_s: float = POLL_INTERVAL_S,
    ) -> None:
        self.client = client
        self.on_change = on_change
        self.poll_interval_s = poll_interval_s
        self._last: dict[str, Any] | None = None  # the last row the helper confirmed
        self._bridges: set[asyncio.Task[None]] = set()
        self._poll: asyncio.Task[None] | None = None

    def table(self) -> dict[str, OpHandler]:
        """Ops to merge into the relay's op table."""
        return {"screen.local": self._screen_op}

    # -- desktop ops --------------------------------------------------------------------

    async def start(self, args: dict[str, Any]) -> dict[str, Any]:
        """Start (or return) the local desktop; the slot is always ``main``."""
        if unknown := sorted(set(args) - _START_ARGS):
            raise InvalidArgs(unknown[0], "unknown argument")
        if args.get("slot", LOCAL_SLOT) != LOCAL_SLOT:
            raise InvalidArgs("slot", "a relay has one local desktop, in slot 'main'")
        if args.get("audio"):
            raise OpError(ErrorCode.UNAVAILABLE, "local desktops have no audio")
        body = {"started_by": args.get("started_by")}
        result = await self.client.call("POST", "/v1/local/start", body)
        self._last = _row(result)
        return self._last | {"already_running": bool(result.get("already_running"))}

    async def stop(self, args: dict[str, Any]) -> dict[str, Any]:
        """Compare-and-stop at the helper (under its lock)."""
        session_id = args.get("desktop_session_id")
        if not isinstance(session_id, str) or not session_id:
            raise InvalidArgs("desktop_session_id", "required")
        body = {"local_screen_session_id": session_id}
        result = dict(await self.client.call("POST", "/v1/local/stop", body))
        result.pop("ok", None)
        if result.get("stopped"):
            self._last = None
        return result

    async def rows(self) -> list[dict[str, Any]]:
        """The local row; the last known one as ``unknown`` while the helper is unreachable."""
        try:
            status = await self.client.call("GET", "/v1/local/status")
        except OpError as err:
            if self._last is None:
                return []
            log.info("host helper unavailable: %s", err.message)
            return [self._last | {"state": "unknown", "reason": UNREACHABLE}]
        desktop = status.get("desktop")
        self._last = _row(desktop) if isinstance(desktop, dict) else None
        return [self._last] if self._last else []

    async def open_channel(
        self, link: ServerLink, channel_id: int, row: dict[str, Any]
    ) -> dict[str, Any]:
        """Carry the helper's connect stream on a wire channel (socket pair → ``TcpChannel``)."""
        port = row.get("websockify_port")
        if row.get("state") != "running" or not isinstance(port, int):
            raise OpError(ErrorCode.UNAVAILABLE, "the host helper does not answer")
        ws = await self.client.connect(port)
        ours, theirs = socket.socketpair()
        target = await TargetStream.over(ours)
        helper_reader, helper_writer = await asyncio.open_connection(sock=theirs)
        task = asyncio.create_task(bridge(ws, helper_reader, helper_writer), name="local-bridge")
        self._bridges.add(task)
        task.add_done_callback(self._bridges.discard)
        session_id = row["desktop_session_id"]

        async def ended() -> tuple[ChannelCloseCode, str]:
            rows = await self.rows()
            if not any(r["desktop_session_id"] == session_id for r in rows):
                return ChannelCloseCode.DESKTOP_STOPPED, "desktop stopped"
            return ChannelCloseCode.TARGET_CLOSED, "target closed the connection"

        link.start_channel(TcpChannel(ChannelId(channel_id), link, target, ended))
        return {"channel_id": channel_id}

    # -- screen ---------------------------------------------------------------------------

    async def _screen_op(self, link: ServerLink, args: dict[str, Any]) -> dict[str, Any]:
        return await self.screen(args)

    async def screen(self, args: dict[str, Any]) -> dict[str, Any]:
        """``screen.local {action, args}``: run a screen action on the host display."""
        action, action_args = args.get("action"), args.get("args", {})
        if not isinstance(action, str) or not action.isidentifier():
            raise InvalidArgs("action", "must name a screen action")
        if not isinstance(action_args, dict):
            raise InvalidArgs("args", "must be an object")
        target = action_args.pop("revision_target", None)
        if target is not None:
            await self._check_revision_target(target)
        result = dict(await self.client.call("POST", f"/v1/screen/{action}", action_args))
        result.pop("ok", None)
        if self._last is not None:
            result["desktop_session_id"] = self._last["desktop_session_id"]
        return result

    async def keyboard_state(self, row: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """``keyboard.state`` of the running local session ``row``: the host display's LEDs."""
        if row.get("state") != "running":
            raise self.client.unreachable_error()
        try:
            async with asyncio.timeout(timeout_s):
                state = await self.client.call("POST", "/v1/screen/keyboard_state", {})
        except TimeoutError:
            raise OpError(ErrorCode.TIMEOUT, "reading the keyboard state timed out") from None
        return {key: state.get(key) for key in KEYBOARD_STATE_KEYS}

    async def _check_revision_target(self, target: object) -> None:
        """A screenshot of one local session must not guard input on a newer one."""
        rows = await self.rows()
        current = rows[0]["desktop_session_id"] if rows else None
        wanted = target.get("desktop_session_id") if isinstance(target, dict) else None
        if wanted is not None and wanted != current:
            raise OpError(
                ErrorCode.REVISION_MISMATCH,
                "the screen revision belongs to another local session than the running one",
            )

    # -- watch ----------------------------------------------------------------------------

    def start_watch(self) -> None:
        """Poll the helper so its failures and stops reach the server as ``desktop.changed``."""
        if self._poll is None or self._poll.done():
            self._poll = asyncio.create_task(self._watch(), name="local-desktop-watch")

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.poll_interval_s)
            try:
                await self.check()
            except Exception:
                log.exception("local desktop poll failed")

    async def check(self) -> None:
        """One poll: a session the helper no longer runs is reported ended, with its reason."""
        before = self._last
        try:
            status = await self.client.call("GET", "/v1/local/status")
        except OpError:
            return  # unknown, not ended: the next answer decides
        desktop = status.get("desktop")
        self._last = _row(desktop) if isinstance(desktop, dict) else None
        if (
            before is None
            or (self._last or {}).get("desktop_session_id") == before["desktop_session_id"]
        ):
            return
        failure = status.get("last_failure") or {}
        failed = failure.get("local_screen_session_id") == before["desktop_session_id"]
        event = before | {
            "state": "failed" if failed else "stopped",
            "reason": failure.get("reason") if failed else "stopped on the host helper",
        }
        if self.on_change is not None:
            await self.on_change(event)

    async def aclose(self) -> None:
        """Stop polling, close viewer bridges and the HTTP session (the desktop keeps running)."""
        tasks = [t for t in (self._poll, *self._bridges) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.client.aclose()
