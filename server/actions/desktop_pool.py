"""``desktop_pool``: the warm pools of the conversation's relays, for operators (admin
accounts): ready desktops per profile, hits and misses (docs/desktops.md, "Warm pool")."""

from __future__ import annotations

from typing import Any, Final

from server.actions.context import ActionContext
from server.actions.desktop import RELAY
from server.actions.registry import Action, tool_schema
from server.relays.pools import pool_reports
from wire.errors import ErrorCode, OpError
from wire.ops import POOL_CAPABILITY


async def pool(ctx: ActionContext, args: dict[str, Any]) -> dict[str, Any]:
    if not ctx.principal.is_admin:
        raise OpError(ErrorCode.FORBIDDEN, "the warm pool is shown to operators (admin accounts)")
    visible = await ctx.store.relays_visible_in(ctx.conversation_id)
    if args.get("relay") is not None:
        visible = [await ctx.resolve_relay(args["relay"])]
    keeping = [
        r
        for r in visible
        if ctx.relays.is_connected(r.relay_id)
        and POOL_CAPABILITY in ctx.relays.capabilities(r.relay_id)
    ]
    reports = await pool_reports(ctx.relays, [r.relay_id for r in keeping])
    return {
        "pools": [
            {"relay": r.name, "relay_id": r.relay_id, **reports[r.relay_id]}
            for r in keeping
            if r.relay_id in reports
        ]
    }


POOL_ACTIONS: Final[tuple[Action, ...]] = (
    Action(
        "desktop_pool",
        "read",
        tool_schema({"relay": RELAY}),
        "Operators only (admin accounts): each relay's warm pool of ready desktops (size, "
        "ready and starting per profile, at the pool's geometry) and how many starts it "
        "served (hits) or found empty (misses).",
        pool,
    ),
)
