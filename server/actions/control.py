"""The control actions: read who is in control, take it, hand it back, stop the agent.

A desktop is addressed like the other desktop actions (``relay``, ``kind``, ``slot`` or
``desktop_session_id``) and must be running (``not_running`` otherwise). Taking control,
handing it back and Stop are a person's acts: an API token (an agent) gets ``403 forbidden``.
Stop revokes the agents' grants, ends their requests in flight and refuses them a new grant for
``RELAYDESK_AGENT_REGRANT_COOLDOWN_S``, on the desktop and in its slot.
"""

from __future__ import annotations

from typing import Any, Final

from server.actions.context import ActionContext
from server.actions.desktop import KIND, RELAY, SESSION_ID, SLOT, _live_row
from server.actions.desktop import _tracked_relay as tracked_relay
from server.actions.registry import Action, tool_schema
from server.actions.schema import Schema
from server.control.audit import AuditContext
from server.control.gate import DesktopTarget, control_of, require_person
from server.control.model import DesktopKey
from server.db.rows import DesktopRow
from wire.errors import ErrorCode, OpError

TARGET: Final[dict[str, Schema]] = {
    "relay": RELAY,
    "kind": KIND,
    "slot": SLOT,
    "desktop_session_id": SESSION_ID,
}
AGENT: Final[Schema] = {
    "type": "string",
    "minLength": 1,
    "maxLength": 64,
    "description": "Only this agent (its user name); absent: every agent acting on the desktop.",
}


async def _running(ctx: ActionContext, args: dict[str, Any]) -> tuple[DesktopRow, DesktopKey]:
    await tracked_relay(ctx, args)
    row = await _live_row(ctx, args)
    if row is None or row.state != "running":
        raise OpError(ErrorCode.NOT_RUNNING, "no running desktop there")
    ctx.desktop_session_id = row.desktop_session_id
    return row, DesktopKey(row.relay_id, row.desktop_session_id)


def _reply(row: DesktopRow, control: Any) -> dict[str, Any]:
    return {"desktop_session_id": row.desktop_session_id, "control": dict(control)}


async def control_state(ctx: ActionContext, args: dict[str, Any]) -> dict[str, Any]:
    row, key = await _running(ctx, args)
    return _reply(row, await control_of(ctx).state(key))


async def take_control(ctx: ActionContext, args: dict[str, Any]) -> dict[str, Any]:
    require_person(ctx, "desktop_take_control")
    row, key = await _running(ctx, args)
    principal = ctx.principal
    return _reply(row, await control_of(ctx).take(key, principal.username, principal.user_id))


async def hand_back(ctx: ActionContext, args: dict[str, Any]) -> dict[str, Any]:
    require_person(ctx, "desktop_hand_back")
    row, key = await _running(ctx, args)
    return _reply(row, await control_of(ctx).hand_back(key))


async def agent_stop(ctx: ActionContext, args: dict[str, Any]) -> dict[str, Any]:
    require_person(ctx, "agent_stop")
    row, key = await _running(ctx, args)
    agent_id = await _agent_id(ctx, args.get("agent"))
    context = AuditContext(ctx.conversation_id, ctx.source, ctx.request_id)
    place = DesktopTarget.of_row(row).place
    stopped = await control_of(ctx).stop(
        key, ctx.principal.username, agent_id, context, place=place
    )
    relay_names = [row.relay_id] + ([ctx.relay.name] if ctx.relay is not None else [])
    revoked = await control_of(ctx).approvals.revoke(
        relay_names, row.kind, row.slot, agent_id, ctx.principal.username
    )
    names = sorted({grant.agent_name for grant in stopped.revoked})
    ctx.outcome = "stopped" if names or stopped.cancelled or revoked else "no_agent"
    cooldown = control_of(ctx).policies.for_relay(key.relay_id).regrant_cooldown_s
    return {
        **_reply(row, stopped.info),
        "stopped": names,
        "cancelled": stopped.cancelled,
        "regrant_after_s": cooldown,
        "safety_checks_revoked": revoked,
    }


async def safety_checks_list(ctx: ActionContext, args: dict[str, Any]) -> dict[str, Any]:
    return {"requests": await control_of(ctx).approvals.listing(ctx.conversation_id)}


async def safety_checks_decide(ctx: ActionContext, args: dict[str, Any]) -> dict[str, Any]:
    require_person(ctx, "safety_checks_decide")
    decided = await control_of(ctx).approvals.decide(
        ctx.conversation_id, args["approval_id"], args["decision"], ctx.principal.username
    )
    ctx.outcome = decided.state
    return {"request": decided.info()}


async def _agent_id(ctx: ActionContext, name: Any) -> str | None:
    if not isinstance(name, str):
        return None
    user = await ctx.store.get_user_by_name(name)
    if user is None:
        raise OpError(ErrorCode.NOT_FOUND, f"no agent named {name[:64]!r}", {"field": "agent"})
    return user.user_id


APPROVAL_ID: Final[Schema] = {
    "type": "string",
    "pattern": "^apv_[0-9a-f]{16}$",
    "description": "The request, as safety_checks_list and the safety_checks_pending event "
    "name it.",
}
DECISION: Final[Schema] = {
    "type": "string",
    "enum": ["approve", "deny"],
    "description": "approve: the agent's call runs when sent again; deny: it stays refused.",
}

CONTROL_ACTIONS: Final[tuple[Action, ...]] = (
    Action(
        "desktop_control",
        "read",
        tool_schema(TARGET),
        "Who is in control of a running desktop: idle, agent (with its name) or person (with "
        "the person's name; held when they took control). While a person is in control, agent "
        "input is refused with takeover_active; reads keep working.",
        control_state,
    ),
    Action(
        "desktop_take_control",
        "write",
        tool_schema(TARGET),
        "Take control of a running desktop as a person: agent input is refused "
        "(takeover_active) until desktop_hand_back. People only: an API token gets forbidden.",
        take_control,
        audit_op="desktop.take_control",
    ),
    Action(
        "desktop_hand_back",
        "write",
        tool_schema(TARGET),
        "Hand a desktop back after desktop_take_control: agents may act on it again. People "
        "only: an API token gets forbidden.",
        hand_back,
        audit_op="desktop.hand_back",
    ),
    Action(
        "agent_stop",
        "write",
        tool_schema({**TARGET, "agent": AGENT}),
        "Stop the agent acting on a running desktop: its grant is revoked, its request in "
        "flight is cancelled, and its input is refused with stopped_by_user; a new grant for "
        "it is refused for the cooldown (RELAYDESK_AGENT_REGRANT_COOLDOWN_S), also on a desktop "
        "started again in the same slot. People only: an API token gets forbidden.",
        agent_stop,
        audit_op="agent.stop",
    ),
    Action(
        "safety_checks_list",
        "write",
        tool_schema({}),
        "The safety checks models raised in this conversation's computer-use calls, newest "
        "first: pending ones wait for a person's decision (safety_checks_decide); approved "
        "ones let the same call run until they expire; Stop revokes them. Role write: the "
        "checks' messages tell what the model saw on a desktop.",
        safety_checks_list,
        read_only=True,
    ),
    Action(
        "safety_checks_decide",
        "write",
        tool_schema(
            {"approval_id": APPROVAL_ID, "decision": DECISION}, ("approval_id", "decision")
        ),
        "Approve or deny a pending request for the safety checks a model raised: once "
        "approved, the agent's same call runs when it sends it again (for 10 minutes, or until "
        "Stop). People only: an API token gets forbidden.",
        safety_checks_decide,
        audit_op="agent.safety_checks",
    ),
)
