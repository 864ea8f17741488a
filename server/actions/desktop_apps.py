"""The actions about what runs in a desktop: its launchable apps, launching one, and wiping a
slot's kept home.

The launchable list is the desktop's profile's (relay/desktops/profiles.py): the same list its
panel, its menu and ``/desktop apps`` show. Apps are named by id, never by command line.
"""

from __future__ import annotations

from typing import Any, Final

from server.actions.a11y import LOCAL
from server.actions.a11y import apps as a11y_apps
from server.actions.context import ActionContext
from server.actions.desktop import (
    KIND,
    RELAY,
    SESSION_ID,
    SLOT,
    _kind,
    running_row,
)
from server.actions.desktop import _tracked_relay as tracked_relay
from server.actions.registry import Action, tool_schema
from server.actions.schema import Schema
from server.control.gate import DesktopTarget, admit_agent_place, agent_act
from wire import ops

APP_ID: Final[Schema] = {
    "type": "string",
    "pattern": "^[a-z0-9][a-z0-9_-]{0,31}$",
    "description": "Id of a launchable app, as desktop_apps lists it (e.g. 'chromium').",
}


async def launch(ctx: ActionContext, args: dict[str, Any]) -> dict[str, Any]:
    row = await running_row(ctx, args)
    session_id, wait_s = row.desktop_session_id, float(args["wait_s"])
    launch_args = ops.DesktopLaunchArgs(
        desktop_session_id=session_id, app=args["app"], wait_s=wait_s
    )
    # An agent's launch is input: refused while a person holds the desktop or after Stop.
    async with agent_act(ctx, DesktopTarget.of_row(row)):
        answer = await ctx.relay_call(ops.DESKTOP_LAUNCH, launch_args, wait_s)
    reply: dict[str, Any] = {
        "desktop_session_id": session_id,
        "app": answer["app"],
        "launched": True,
    }
    if "window" in answer:
        reply["app_window"] = answer["window"]
    if answer.get("accessible") is False:
        reply["note"] = "this app exposes no accessibility tree: use the screen tool with it"
    return reply


async def reset_home(ctx: ActionContext, args: dict[str, Any]) -> dict[str, Any]:
    await tracked_relay(ctx, args)
    kind, slot = _kind(args), str(args.get("slot", "main"))
    if not args.get("confirm"):
        confirm = {
            "conversation_id": ctx.conversation_id,
            "relay": ctx.relay_id,
            "kind": kind,
            "slot": slot,
            "confirm": True,
        }
        return {
            "confirm_required": True,
            "kind": kind,
            "slot": slot,
            "confirm": {"action": "desktop_reset_home", "args": confirm},
        }
    await admit_agent_place(ctx, kind, slot)  # not by an agent a person's Stop holds there
    answer = await ctx.relay_call(ops.DESKTOP_RESET_HOME, ops.SlotArgs(kind=kind, slot=slot))
    ctx.outcome = "reset" if answer["existed"] else "was_empty"
    return {"reset": True, "kind": kind, "slot": slot, "existed": answer["existed"]}


DESKTOP_APP_ACTIONS: Final[tuple[Action, ...]] = (
    Action(
        "desktop_apps",
        "write",
        tool_schema(
            {
                "relay": RELAY,
                "kind": KIND,
                "slot": SLOT,
                "desktop_session_id": SESSION_ID,
                "local": LOCAL,
            }
        ),
        "List the apps of a running desktop: launchable (id, name, icon, desktop_entry: what "
        "desktop_launch may start, from its profile) and running (each app's name, pid and "
        "top-level windows with ids, titles, bounds and which has the focus, read from the "
        "accessibility bus; apps the relay's policy refuses are listed with the reason).",
        a11y_apps,
        read_only=True,
    ),
    Action(
        "desktop_launch",
        "write",
        tool_schema(
            {
                "relay": RELAY,
                "kind": KIND,
                "slot": SLOT,
                "desktop_session_id": SESSION_ID,
                "app": APP_ID,
                "wait_s": {
                    "type": "number",
                    "minimum": 0,
                    "maximum": 60,
                    "default": 15,
                    "description": "Wait this long for the app's window on the "
                    "accessibility bus (0: return at once).",
                },
            },
            ("app",),
        ),
        "Start one launchable app (an id from desktop_apps) in a running desktop; answers once "
        "its window is on the accessibility bus (app_window), or a timeout error.",
        launch,
        audit_op="desktop.launch",
    ),
    Action(
        "desktop_reset_home",
        "write",
        tool_schema(
            {
                "relay": RELAY,
                "kind": KIND,
                "slot": SLOT,
                "confirm": {
                    "type": "boolean",
                    "default": False,
                    "description": "true wipes; without it nothing changes and "
                    "the answer shows what would be wiped.",
                },
            }
        ),
        "Wipe the kept home of a slot (desktops started with persist_home: true). Refused while "
        "a desktop runs there. First call without confirm, then again with the returned args.",
        reset_home,
        audit_op="desktop.reset_home",
    ),
)
