"""The relay's ops: one small handler per op, dispatched by table."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from relay.channels import TcpChannel
from wire.errors import ErrorCode, InvalidArgs, OpError
from wire.ids import ChannelId
from wire.messages import Request

if TYPE_CHECKING:
    from relay.link import ServerLink

log = logging.getLogger(__name__)

Handler = Callable[["ServerLink", dict[str, Any]], Awaitable[Any]]
CONNECT_TIMEOUT_S = 5.0


class Desktops(Protocol):
    """What the handlers need of the desktop manager."""

    async def start(self, **kwargs: Any) -> dict[str, Any]: ...

    async def status(self) -> list[dict[str, Any]]: ...

    async def stop(self, *, kind: str, slot: str, desktop_session_id: str) -> dict[str, Any]: ...


class Handlers:
    """Routes each op to its handler; unknown ops get ``unknown_op``."""

    def __init__(
        self,
        desktops: Desktops | None,
        *,
        missing: list[str] | None = None,
        extra_ops: dict[str, Handler] | None = None,
    ) -> None:
        self.desktops = desktops
        self.missing = missing or []
        self._table: dict[str, Handler] = {
            "ping": self._ping,
            "desktop.start": self._desktop_start,
            "desktop.status": self._desktop_status,
            "desktop.stop": self._desktop_stop,
            "channel.open": self._channel_open,
            **(extra_ops or {}),  # screen.<action> (relay/screen_ops.py)
        }

    def capabilities(self) -> list[str]:
        caps = ["session_identity"]
        if self.desktops is not None and not self.missing:
            caps.append("virtual_desktop")
        return caps

    async def desktop_rows(self) -> list[dict[str, Any]]:
        return await self.desktops.status() if self.desktops is not None else []

    async def dispatch(self, link: ServerLink, request: Request) -> Any:
        handler = self._table.get(request.op)
        if handler is None:
            raise OpError(ErrorCode.UNKNOWN_OP, f"unknown op {request.op[:64]!r}")
        return await handler(link, request.args)

    async def _ping(self, link: ServerLink, args: dict[str, Any]) -> dict[str, Any]:
        """The empty op: answers at once, echoing ``echo`` (round-trip measurement)."""
        return {"echo": args.get("echo")}

    def _manager(self) -> Desktops:
        if self.desktops is None or self.missing:
            missing = ", ".join(self.missing) or "desktop support"
            raise OpError(
                ErrorCode.UNAVAILABLE, f"this relay cannot run desktops; missing: {missing}"
            )
        return self.desktops

    async def _desktop_start(self, link: ServerLink, args: dict[str, Any]) -> dict[str, Any]:
        allowed = {"kind", "slot", "geometry", "depth", "audio", "started_by", "apps"}
        unknown = sorted(set(args) - allowed)
        if unknown:
            raise InvalidArgs(unknown[0], "unknown argument")
        return await self._manager().start(**args)

    async def _desktop_status(self, link: ServerLink, args: dict[str, Any]) -> dict[str, Any]:
        return {"desktops": await self.desktop_rows()}

    async def _desktop_stop(self, link: ServerLink, args: dict[str, Any]) -> dict[str, Any]:
        session_id = args.get("desktop_session_id")
        if not isinstance(session_id, str) or not session_id:
            raise InvalidArgs("desktop_session_id", "required")
        return await self._manager().stop(
            kind=str(args.get("kind", "virtual")),
            slot=str(args.get("slot", "main")),
            desktop_session_id=session_id,
        )

    async def _find_desktop(self, session_id: object) -> dict[str, Any]:
        for row in await self.desktop_rows():
            if row.get("desktop_session_id") == session_id:
                return row
        raise OpError(ErrorCode.NOT_RUNNING, "no running desktop has this session id")

    async def _channel_open(self, link: ServerLink, args: dict[str, Any]) -> dict[str, Any]:
        channel_id = args.get("channel_id")
        target = args.get("target")
        if not isinstance(channel_id, int) or isinstance(channel_id, bool) or channel_id < 0:
            raise InvalidArgs("channel_id", "must be a non-negative integer")
        if not isinstance(target, dict) or target.get("type") != "vnc":
            raise InvalidArgs("target", "must be {type: 'vnc', desktop_session_id}")
        row = await self._find_desktop(target.get("desktop_session_id"))
        port = int(row["vnc_port"])
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
        except (OSError, TimeoutError) as err:
            raise OpError(
                ErrorCode.UNAVAILABLE, "the desktop's VNC server does not answer"
            ) from err
        link.add_channel(TcpChannel(ChannelId(channel_id), link, reader, writer))
        return {"channel_id": channel_id}
