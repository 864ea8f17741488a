"""The screen tool's input actions through the control gate (``server.control.gate``).

Reads (screenshots, zoom, pointer position, screen size, lock keys) pass untouched: a person
in control never stops an agent from looking. Every other action is input: its desktop is
resolved (the named session, else the relay's running ``local`` or ``virtual`` desktop in slot
``main``), admitted, tracked in flight, and marked for the desktop's viewers once done; the
call is then addressed to that session, so no other desktop ever gets the admitted input.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Final

from server.control.gate import DesktopTarget, GateContext, agent_input, resolve_target
from wire.errors import ErrorCode, OpError

# Anything else the screen tool does is input (a new action is gated until listed here).
READ_ACTIONS: Final = frozenset(
    {"screenshot", "zoom", "mouse_position", "screen_size", "keyboard_state"}
)
# What the viewers' marker may show of an action: where, never what was typed.
_SHAPE_KEYS: Final = ("button", "direction", "amount")

Refused = Callable[[OpError], Awaitable[None]]


def _points(args: dict[str, Any]) -> dict[str, Any]:
    """Screen pixels of the action, when the call gave pixels (not normalized or zoom ones)."""
    if args.get("coordinates", "pixels") != "pixels":
        return {}
    shape: dict[str, Any] = {k: args[k] for k in ("x", "y") if isinstance(args.get(k), int | float)}
    start, end = args.get("from"), args.get("to")
    if isinstance(start, dict) and "x" not in shape:
        shape.update({k: start.get(k) for k in ("x", "y")})
    if isinstance(end, dict):
        shape["to_x"], shape["to_y"] = end.get("x"), end.get("y")
    return shape


def action_shape(args: dict[str, Any]) -> dict[str, Any]:
    """The marker's data: where (screen pixels), button, direction; the size of typed text or
    chords, never the text or the keys."""
    shape = _points(args)
    shape.update({k: args[k] for k in _SHAPE_KEYS if isinstance(args.get(k), str | int)})
    if isinstance(args.get("text"), str):
        shape["text_length"] = len(args["text"])
    if isinstance(args.get("key"), str):
        shape["key_count"] = len([part for part in args["key"].split("+") if part]) or 1
    return shape


async def _target(ctx: GateContext, args: dict[str, Any]) -> DesktopTarget | None:
    """The running desktop the call means. None when the inventory knows of none: then there
    is nothing a person could hold, and the relay answers for itself (``not_running``, or
    ``unavailable`` for a real screen without a host helper) before any input."""
    session = args.get("desktop_session_id")
    try:
        return await resolve_target(
            ctx,
            desktop_session_id=session if isinstance(session, str) else None,
            kind="local" if args.get("local") is True else "virtual",
        )
    except OpError as err:
        if err.code is ErrorCode.NOT_RUNNING:
            return None
        raise


@contextlib.asynccontextmanager
async def screen_input(
    ctx: GateContext, args: dict[str, Any], refused: Refused
) -> AsyncIterator[None]:
    """Gate one ``screen`` call; ``refused`` audits a refusal the tool never saw."""
    action = args.get("action")
    target = None
    if isinstance(action, str) and action not in READ_ACTIONS:
        target = await _target(ctx, args)
    if target is None or not isinstance(action, str):
        yield
        return
    # The input goes to exactly the desktop admitted: a replaced one answers not_running.
    args["desktop_session_id"] = target.desktop_session_id
    running = False
    try:
        async with agent_input(ctx, target) as grant:
            running = True
            yield
            grant.acted(action, **action_shape(args))
    except OpError as err:
        if not running or err.code is ErrorCode.STOPPED_BY_USER:
            await refused(err)
        raise
