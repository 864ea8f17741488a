"""``desktop_record``: turn a running desktop's recording on or off (docs/recording.md).

The recording belongs to the conversation it was turned on in: only its members see it.
``desktop_start {record: true}`` turns it on the same way (``server.actions.desktop.record``).
"""

from __future__ import annotations

from typing import Any, Final

from server.actions.context import ActionContext
from server.actions.control import TARGET, _running
from server.actions.desktop import record
from server.actions.registry import Action, tool_schema
from server.actions.schema import Schema
from wire.errors import ErrorCode, OpError

ON: Final[Schema] = {
    "type": "boolean",
    "description": "true: record the desktop's screen from now on; false: stop recording.",
}


async def desktop_record(ctx: ActionContext, args: dict[str, Any]) -> dict[str, Any]:
    row, _key = await _running(ctx, args)
    if args["on"]:
        answer = await record(ctx, row)
    elif ctx.parts.recordings is None:
        raise OpError(ErrorCode.UNAVAILABLE, "this server keeps no recordings")
    else:
        ended = await ctx.parts.recordings.turn_off(row)
        answer = {"recording": False, "recording_id": ended.recording_id if ended else None}
    ctx.outcome = "on" if args["on"] else "off"
    return {"desktop_session_id": row.desktop_session_id, **answer}


RECORDING_ACTIONS: Final = (
    Action(
        "desktop_record",
        "write",
        tool_schema({**TARGET, "on": ON}, ("on",)),
        "Turn the recording of a running desktop's screen on or off. A recording keeps the "
        "video and, on the same clock, every action on the desktop (its timeline); members of "
        "the conversation watch it in the Recordings view or through /api/v1/conversations/"
        "{conversation_id}/recordings.",
        desktop_record,
        audit_op="desktop.record",
    ),
)
