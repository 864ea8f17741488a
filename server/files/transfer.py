"""One file transfer over a relay's ``file`` channel, as the file routes run it: the caller
admitted like an action's (member role, the running desktop, the control gate for uploads),
the channel opened, the header line read, the bytes pumped, the attempt audited.

Every byte passes through a :class:`~server.relays.channel.ServerChannel` whose credit window
bounds what is buffered: an upload reads the next piece of the request body only once the
relay took the last one, a download reads from the channel only as fast as the client takes
the answer. So memory stays flat whatever the file's size (docs/files.md).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Final

from server.actions import audit
from server.actions.context import ActionContext
from server.actions.desktop import running_row
from server.actions.desktop_files import path_hash
from server.actions.errors import relay_error
from server.auth.scopes import scope_refusal, scoped_role
from server.db.records import Role, role_allows
from server.db.rows import DesktopRow
from server.relays.router import RelayChannel
from wire.errors import ChannelClosedError, ErrorCode, OpError
from wire.frames import Payload

OPEN_TIMEOUT_S: Final = 30.0
# The longest header or result line a relay sends.
MAX_LINE: Final = 64 * 1024
ERROR_CODES: Final = {code.value: code for code in ErrorCode}


async def admit(
    ctx: ActionContext, conversation_id: str, role: Role, where: dict[str, Any]
) -> DesktopRow:
    """The running desktop ``where`` names, for a member with ``role`` at least."""
    ctx.conversation_id = conversation_id
    if (why := scope_refusal(ctx.principal, conversation_id, role)) is not None:
        raise OpError(ErrorCode.FORBIDDEN, f"files: {why}")
    held = scoped_role(
        ctx.principal,
        conversation_id,
        await ctx.store.get_role(conversation_id, ctx.principal.user_id),
    )
    if not role_allows(held, role):
        raise OpError(ErrorCode.FORBIDDEN, f"files need role {role} here")
    if held is not None:
        ctx.role = held
    return await running_row(ctx, where)


async def open_transfer(
    ctx: ActionContext, row: DesktopRow, transfer: dict[str, Any]
) -> LineChannel:
    """The relay's ``file`` channel for ``transfer``, its header line read."""
    target = {"type": "file", "desktop_session_id": row.desktop_session_id, "file": transfer}
    try:
        channel = await ctx.relays.get(ctx.relay_id).open_channel(target, OPEN_TIMEOUT_S)
    except OpError as err:
        raise relay_error(err) from err
    lines = LineChannel(channel)
    try:
        lines.header = await lines.line()
    except BaseException:
        await channel.close()
        raise
    return lines


@dataclass
class LineChannel:
    """A file channel: JSON lines around raw bytes."""

    channel: RelayChannel
    header: dict[str, Any] = field(default_factory=dict)
    _rest: bytes = b""

    async def line(self) -> dict[str, Any]:
        """The next JSON line; an ``ok: false`` one as its error."""
        buffer = bytearray(self._rest)
        while b"\n" not in buffer:
            if len(buffer) > MAX_LINE:
                raise OpError(ErrorCode.PROTOCOL_ERROR, "the relay's file stream broke")
            try:
                buffer += await self.channel.read()
            except ChannelClosedError:
                raise OpError(ErrorCode.UNAVAILABLE, "the file stream ended early") from None
        line, _, rest = bytes(buffer).partition(b"\n")
        self._rest = rest
        answer: dict[str, Any] = json.loads(line)
        if not answer.get("ok"):
            code = ERROR_CODES.get(str(answer.get("code")), ErrorCode.ACTION_FAILED)
            raise OpError(code, str(answer.get("message", code.value))[:500])
        result: dict[str, Any] = answer["result"]
        return result

    async def data(self) -> AsyncIterator[Payload]:
        """The raw bytes after the header, until the relay ends the channel."""
        if self._rest:
            rest, self._rest = self._rest, b""
            yield rest
        while True:
            try:
                yield await self.channel.read()
            except ChannelClosedError:
                return

    async def close(self) -> None:
        await self.channel.close()


async def record(ctx: ActionContext, op: str, path: str, error: OpError | None = None) -> None:
    """The transfer's audit row: the path by its hash (server.actions.desktop_files)."""
    verb = op.rpartition("_")[2]
    if error is None:
        await audit.record(ctx, op, f"{verb}:{path_hash(ctx.conversation_id, path)}")
    else:
        await audit.record(ctx, op, error.code.value, error.message)
