"""The accessibility actions: observe and act on a desktop through its accessibility tree.

``desktop_observe``, ``desktop_find``, ``desktop_read``, ``desktop_wait`` (reads: they show what
is on the desktop, so role ``write`` like the screen) and ``desktop_click``, ``desktop_type``,
``desktop_key``, ``desktop_scroll``, ``desktop_focus`` (acts: role ``write``, audited) run on
the relay's accessibility worker of the desktop
(``relay/a11y``). Elements come back as qualified refs ``@<snapshot>:<element>`` that the
relay re-resolves against the live tree before acting; every result says ``source: "a11y"``
and every act says ``method: native|physical``. docs/accessibility.md has the whole contract.
"""

from __future__ import annotations

from typing import Any, Final

from server.actions import audit
from server.actions.context import ActionContext
from server.actions.desktop import KIND, RELAY, SESSION_ID, SLOT, running_row
from server.actions.registry import Action, tool_schema
from server.actions.schema import Schema
from server.control.gate import DesktopTarget, agent_input
from wire import a11y_selector, ops
from wire.errors import ErrorCode, InvalidArgs, OpError

# A worker's own timeout (a hung app, a wait not satisfied) comes with advice; the relay's
# silence does not.
EXTRA_S: Final = 10.0
LOCAL: Final[Schema] = {
    "type": "boolean",
    "default": False,
    "description": "true: the relay host's real screen (same as kind 'local').",
}
REF: Final[Schema] = {
    "type": "string",
    "pattern": "^@[a-z0-9]{8}:e[0-9]{1,6}$",
    "description": "An element ref from desktop_observe or desktop_find, e.g. '@s8f3k2p9:e17'.",
}
APP: Final[Schema] = {
    "type": "string",
    "minLength": 1,
    "maxLength": 128,
    "description": "An app by its name or command as desktop_apps lists it, or its pid.",
}
WINDOW: Final[Schema] = {
    "type": "string",
    "minLength": 1,
    "maxLength": 256,
    "description": "A window: its id from desktop_apps ('@…:eN') or its exact title.",
}
SELECTOR: Final[Schema] = {
    "type": "string",
    "minLength": 1,
    "maxLength": a11y_selector.MAX_TEXT,
    "description": 'Which elements: role[attr op "value"]:pseudo with descendant (space) and '
    "child (>) combinators, e.g. 'push_button[name=\"Save\"]', 'dialog text:focused', "
    "'\"OK\"'. Roles as desktop_observe prints them; attrs name value description id role; "
    "ops = ^= $= *= ~= (case-insensitive contains); pseudos visible enabled focused disabled; "
    "[nth=N] picks one match (0-based).",
}
PHYSICAL: Final[Schema] = {
    "type": "boolean",
    "default": True,
    "description": "Allow physical input at the element's live bounds when it has no native "
    "action for this (the relay may forbid it regardless).",
}
TARGET: Final[dict[str, Schema]] = {
    "relay": RELAY,
    "kind": KIND,
    "slot": SLOT,
    "desktop_session_id": SESSION_ID,
    "local": LOCAL,
}
BACKEND: Final[Schema] = {
    "type": "string",
    "enum": ["auto", "atspi"],
    "default": "auto",
    "description": "auto: a browser's page content over its DevTools channel, everything else "
    "over AT-SPI; atspi: all of it over AT-SPI (the page's elements then have screen bounds).",
}
SCOPE: Final[dict[str, Schema]] = {"app": APP, "window": WINDOW}
ACT_AUDIT: Final = "desktop.a11y"


async def _session(ctx: ActionContext, args: dict[str, Any]) -> str:
    return (await running_row(ctx, args)).desktop_session_id


async def a11y_call(
    ctx: ActionContext,
    session_id: str,
    name: ops.A11yCall,
    params: dict[str, Any],
    wait_s: float = 0.0,
) -> dict[str, Any]:
    """One accessibility call on the relay; the worker's own errors pass through as they are."""
    args: ops.A11yArgs = {"desktop_session_id": session_id, "call": name, "params": params}
    answer = await ctx.relay_call(ops.DESKTOP_A11Y, args, wait_s + EXTRA_S)
    result = dict(answer.get("result") or {})
    result["desktop_session_id"] = session_id
    result["source"] = "a11y"
    result.setdefault("backend", "atspi")  # a browser's page content: "cdp" (docs/browser.md)
    return result


def _pick(args: dict[str, Any], *names: str) -> dict[str, Any]:
    return {n: args[n] for n in names if n in args}


def _check_selector(text: str) -> None:
    try:
        a11y_selector.parse(text)
    except a11y_selector.SelectorError as err:
        raise InvalidArgs("selector", str(err)) from None


async def observe(ctx: ActionContext, args: dict[str, Any]) -> dict[str, Any]:
    session = await _session(ctx, args)
    params = _pick(args, "app", "window", "backend", "depth", "max_nodes", "view", "format")
    return await a11y_call(ctx, session, "observe", params)


async def find(ctx: ActionContext, args: dict[str, Any]) -> dict[str, Any]:
    _check_selector(args["selector"])
    session = await _session(ctx, args)
    params = _pick(args, "selector", "app", "window", "backend", "limit")
    return await a11y_call(ctx, session, "find", params)


async def read(ctx: ActionContext, args: dict[str, Any]) -> dict[str, Any]:
    session = await _session(ctx, args)
    return await a11y_call(ctx, session, "read", _pick(args, "ref"))


async def wait(ctx: ActionContext, args: dict[str, Any]) -> dict[str, Any]:
    _check_selector(args["selector"])
    session = await _session(ctx, args)
    params = _pick(args, "selector", "condition", "timeout_ms", "app", "window")
    return await a11y_call(ctx, session, "wait", params, args["timeout_ms"] / 1000)


def _act(action: str, *fields: str) -> Any:
    """An act: agent input, so it runs under the desktop's control gate (a person's takeover
    refuses it with ``takeover_active``, Stop with ``stopped_by_user``; docs/control.md) and
    the desktop's viewers see where it landed."""

    async def handler(ctx: ActionContext, args: dict[str, Any]) -> dict[str, Any]:
        row = await running_row(ctx, args)
        params = {"action": action, **_pick(args, "ref", "physical", *fields)}
        async with agent_input(ctx, DesktopTarget.of_row(row)) as grant:
            result = await a11y_call(ctx, row.desktop_session_id, "act", params)
            at: dict[str, Any] = result["at"] if isinstance(result.get("at"), dict) else {}
            grant.acted(f"desktop_{action}", **{k: at[k] for k in ("x", "y") if k in at})
        ctx.outcome = str(result.get("method", "ok"))
        ctx.details = audit.act_details(action, result, args)
        return result

    return handler


async def apps(ctx: ActionContext, args: dict[str, Any]) -> dict[str, Any]:
    """Launchable apps of the desktop's profile, and the apps running in it with their top-level
    windows (from the accessibility bus; no tree walk)."""
    session = await _session(ctx, args)
    result: dict[str, Any] = {"desktop_session_id": session, "profile": None, "launchable": []}
    try:
        answer = await ctx.relay_call(
            ops.DESKTOP_APPS, ops.DesktopTargetArgs(desktop_session_id=session)
        )
        result |= {"profile": answer["profile"], "launchable": answer["launchable"]}
    except OpError as err:
        if err.code is not ErrorCode.UNAVAILABLE:
            raise
    try:
        running = await a11y_call(ctx, session, "apps", {})
        result |= {
            "running": running.get("apps", []),
            "snapshot": running.get("snapshot"),
            "a11y": {"available": True},
        }
    except OpError as err:
        if err.code not in (ErrorCode.A11Y_UNAVAILABLE, ErrorCode.UNAVAILABLE):
            raise
        result |= {"running": [], "a11y": {"available": False, "reason": err.message}}
    return result


def _schema(extra: dict[str, Schema], required: tuple[str, ...] = ()) -> Schema:
    return tool_schema({**TARGET, **extra}, required)


A11Y_ACTIONS: Final[tuple[Action, ...]] = (
    Action(
        "desktop_observe",
        "write",
        _schema(
            {
                **SCOPE,
                "backend": BACKEND,
                "depth": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 64,
                    "default": 24,
                    "description": "How deep below the window to list.",
                },
                "max_nodes": {
                    "type": "integer",
                    "minimum": 10,
                    "maximum": 5000,
                    "default": 400,
                    "description": "At most this many elements; the answer says when "
                    "the tree was cut.",
                },
                "view": {
                    "type": "string",
                    "enum": ["interactive", "all"],
                    "default": "interactive",
                    "description": "interactive: controls and named context (compact); all: "
                    "every showing element.",
                },
                "format": {
                    "type": "string",
                    "enum": ["text", "json", "both"],
                    "default": "text",
                    "description": "text: one element a line; json: a list of elements.",
                },
            }
        ),
        "Read the accessibility tree of a window (the focused one unless app or window is "
        'named) as compact text, one element a line: \'@ref role "name" value=… [states] '
        "@x,y WxH'. Far cheaper than a screenshot; act on the refs with desktop_click, "
        "desktop_type and the like.",
        observe,
        read_only=True,
    ),
    Action(
        "desktop_find",
        "write",
        _schema(
            {
                **SCOPE,
                "backend": BACKEND,
                "selector": SELECTOR,
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 200,
                    "default": 20,
                    "description": "At most this many matches.",
                },
            },
            ("selector",),
        ),
        "Find elements by selector across the desktop's apps (or one app or window) and "
        "return them as refs, without reading whole trees.",
        find,
        read_only=True,
    ),
    Action(
        "desktop_read",
        "write",
        _schema({"ref": REF}, ("ref",)),
        "Read one element in full: role, name, value, description, text, states, actions, "
        "bounds and number of children, from the live app.",
        read,
        read_only=True,
    ),
    Action(
        "desktop_wait",
        "write",
        _schema(
            {
                **SCOPE,
                "selector": SELECTOR,
                "condition": {
                    "type": "string",
                    "enum": ["exists", "gone", "visible", "enabled", "focused"],
                    "default": "exists",
                    "description": "What the first match must satisfy.",
                },
                "timeout_ms": {
                    "type": "integer",
                    "minimum": 100,
                    "maximum": 20000,
                    "default": 5000,
                    "description": "Give up (error timeout) after this long.",
                },
            },
            ("selector",),
        ),
        "Wait until an element matching the selector exists, is gone, visible, enabled or "
        "focused; woken by the apps' accessibility events.",
        wait,
        read_only=True,
    ),
    Action(
        "desktop_click",
        "write",
        _schema({"ref": REF, "physical": PHYSICAL}, ("ref",)),
        "Click an element: its native action (press, activate, toggle…) first, else a "
        "physical click at its live bounds. Answers method native or physical.",
        _act("click"),
        audit_op=f"{ACT_AUDIT}.click",
    ),
    Action(
        "desktop_type",
        "write",
        _schema(
            {
                "ref": REF,
                "physical": PHYSICAL,
                "text": {
                    "type": "string",
                    "maxLength": 10000,
                    "description": "The text (any Unicode).",
                },
                "mode": {
                    "type": "string",
                    "enum": ["replace", "append"],
                    "default": "replace",
                    "description": "replace the element's text, or append to it.",
                },
            },
            ("ref", "text"),
        ),
        "Set the text of an editable element (native where it can, else focus it and type); "
        "answers the text read back from the element.",
        _act("type", "text", "mode"),
        audit_op=f"{ACT_AUDIT}.type",
    ),
    Action(
        "desktop_key",
        "write",
        _schema(
            {
                "ref": REF,
                "physical": PHYSICAL,
                "keys": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": 200,
                    "description": "A key or chord, e.g. 'Return', 'ctrl+a'.",
                },
            },
            ("ref", "keys"),
        ),
        "Focus an element and press a key or chord in it.",
        _act("key", "keys"),
        audit_op=f"{ACT_AUDIT}.key",
    ),
    Action(
        "desktop_scroll",
        "write",
        _schema(
            {
                "ref": REF,
                "physical": PHYSICAL,
                "into_view": {
                    "type": "boolean",
                    "default": False,
                    "description": "Scroll the element itself into view (native).",
                },
                "direction": {
                    "type": "string",
                    "enum": ["up", "down", "left", "right"],
                    "default": "down",
                    "description": "Where to scroll.",
                },
                "amount": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 50,
                    "default": 3,
                    "description": "Wheel steps.",
                },
            },
            ("ref",),
        ),
        "Scroll an element into view, or scroll inside it by wheel steps.",
        _act("scroll", "into_view", "direction", "amount"),
        audit_op=f"{ACT_AUDIT}.scroll",
    ),
    Action(
        "desktop_focus",
        "write",
        _schema({"ref": REF, "physical": PHYSICAL}, ("ref",)),
        "Give an element the keyboard focus.",
        _act("focus"),
        audit_op=f"{ACT_AUDIT}.focus",
    ),
)
