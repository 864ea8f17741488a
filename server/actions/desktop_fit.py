"""``desktop_fit``: the desktop at the size of a person's viewer.

An Xvfb screen keeps the size it was started with (its RandR offers no other mode, and x11vnc
follows only what the X server does), so fitting restarts the desktop in the same slot, with
the same profile, sound and kept home, at the viewer's size rounded to a geometry the relay
accepts. What ran in the desktop ends; docs/viewing.md, "Fit desktop to window".
"""

from __future__ import annotations

from typing import Any, Final

from server.actions.context import ActionContext
from server.actions.desktop import RELAY, SESSION_ID, _compare_and_stop, running_row, start
from server.actions.registry import Action, tool_schema
from server.control.gate import DesktopTarget, agent_act
from wire import ops

# The geometry rule of the relay (relay/desktops/validation.py), which answers anything else
# with invalid_args: sizes in steps of FIT_STEP (even), inside the bounds, at most 4:1 wide
# and 1:2 tall.
FIT_STEP: Final = 8
MIN_SIZE: Final = (640, 480)
MAX_SIZE: Final = (7680, 4320)
MIN_ASPECT, MAX_ASPECT = 0.5, 4.0


def fit_geometry(width: int, height: int) -> str:
    """The largest accepted ``WIDTHxHEIGHT`` not larger than the viewer's area where it can
    be, else the smallest accepted one (a phone gets 640 px and scrolls or scales)."""
    w = min(max(width, MIN_SIZE[0]), MAX_SIZE[0])
    h = min(max(height, MIN_SIZE[1]), MAX_SIZE[1])
    w = min(w, int(h * MAX_ASPECT))
    h = min(h, int(w / MIN_ASPECT))
    return f"{w - w % FIT_STEP}x{h - h % FIT_STEP}"


async def fit(ctx: ActionContext, args: dict[str, Any]) -> dict[str, Any]:
    row = await running_row(ctx, args)
    geometry = fit_geometry(int(args["width"]), int(args["height"]))
    if geometry == row.geometry:
        ctx.outcome = "same_size"
        return {"restarted": False, "geometry": geometry, "desktop": row.to_dict()}
    kept = await _kept_settings(ctx, row.desktop_session_id)
    async with agent_act(ctx, DesktopTarget.of_row(row)):
        await _compare_and_stop(ctx, row.kind, row.slot, row.desktop_session_id)
    started = await start(ctx, {"kind": row.kind, "slot": row.slot, "geometry": geometry, **kept})
    ctx.outcome = "restarted"
    return {**started, "restarted": True, "geometry": geometry}


async def _kept_settings(ctx: ActionContext, desktop_session_id: str) -> dict[str, Any]:
    """What the new desktop keeps of the old one, as its relay reports it."""
    status = await ctx.relay_call(ops.DESKTOP_STATUS, ops.Empty())
    for reported in status["desktops"]:
        if reported["desktop_session_id"] == desktop_session_id:
            row: dict[str, Any] = dict(reported)
            return {
                k: row[k] for k in ("profile", "persist_home", "audio") if row.get(k) is not None
            }
    return {}


DESKTOP_FIT_ACTIONS: Final[tuple[Action, ...]] = (
    Action(
        "desktop_fit",
        "write",
        tool_schema(
            {
                "relay": RELAY,
                "desktop_session_id": SESSION_ID,
                "width": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 100000,
                    "description": "The viewer's width in pixels.",
                },
                "height": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 100000,
                    "description": "The viewer's height in pixels.",
                },
            },
            ("desktop_session_id", "width", "height"),
        ),
        "Restart a running desktop at the size of a viewer (rounded to a supported geometry: "
        "steps of 8 px, 640x480 to 7680x4320, 1:2 to 4:1), in the same slot with the same "
        "profile, sound and kept home. Programs running in it end. Answers like desktop_start "
        "(a new desktop_session_id and viewer_url), or restarted: false at the same size.",
        fit,
        audit_op="desktop.fit",
    ),
)
