"""The desktop actions: list, start, status, attach, stop-request, compare-and-stop, pause and
resume.

Every handler resolves the relay in the caller's conversation first (``relay_not_found``
otherwise), talks to the relay only through ``ActionContext.relay_call``, and records what the
relay answered in the inventory — the inventory is never guessed. An agent's start and stop
pass the control gate (docs/control.md): not while a person holds the desktop, not while a
person's Stop holds the agent in that slot.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

from server.actions.context import ActionContext
from server.actions.registry import Action, tool_schema
from server.actions.schema import Schema
from server.auth.capability import grant_for, mint
from server.auth.revocation import minted_ref
from server.auth.viewer_policy import agent_viewer_refusal
from server.control.gate import (
    DesktopTarget,
    admit_agent_input,
    admit_agent_place,
    agent_act,
    is_person,
)
from server.db.rows import DesktopRow
from wire import ops
from wire.desktop_rows import SLOT_RE
from wire.errors import ErrorCode, InvalidArgs, OpError, SessionConflict
from wire.ids import RelayId
from wire.snapshots import SNAPSHOT_NAME_RE

RELAY: Final[Schema] = {
    "type": "string",
    "minLength": 1,
    "maxLength": 64,
    "description": "Relay name or id. May be omitted when the conversation sees one relay.",
}
KIND: Final[Schema] = {
    "type": "string",
    "enum": ["virtual", "docker", "local"],
    "default": "virtual",
    "description": "virtual: a desktop the relay creates as processes on its host; docker: "
    "a desktop in its own container (no host files, resource limits; relays that announce "
    "docker_desktop); local: the relay host's real screen.",
}
SLOT: Final[Schema] = {
    "type": "string",
    "pattern": f"^{SLOT_RE.pattern}$",
    "default": "main",
    "description": "Named place of the desktop on its relay; 'main' unless you need another.",
}
SESSION_ID: Final[Schema] = {
    "type": "string",
    "pattern": "^[A-Za-z0-9_-]{1,64}$",
    "description": "The desktop_session_id of the exact desktop incarnation you mean.",
}
SNAPSHOT_NAME: Final[Schema] = {
    "type": "string",
    "pattern": f"^{SNAPSHOT_NAME_RE.pattern[1:-1]}$",
    "description": "Snapshot name: lower-case letters, digits, '-' and '_' (no path "
    "characters), unique in this conversation.",
}
MAX_FORKS: Final = 64
# What desktop_start takes besides its own arguments to start forks of a snapshot
# (server/actions/snapshots.py).
FORK_PROPERTIES: Final[dict[str, Schema]] = {
    "snapshot": {
        **SNAPSHOT_NAME,
        "description": "Start from this snapshot of the conversation (its relay, profile, "
        "geometry, home and apps) instead of a fresh desktop.",
    },
    "count": {
        "type": "integer",
        "minimum": 1,
        "maximum": MAX_FORKS,
        "description": "With snapshot: how many desktops to start from it at once, each with "
        "its own copy of its home (at most the relay's free desktops).",
    },
    "slots": {
        "type": "array",
        "items": {"type": "string", "pattern": f"^{SLOT_RE.pattern}$"},
        "maxItems": MAX_FORKS,
        "description": "With snapshot: the slots of the new desktops; absent: "
        "'<snapshot>-1', '<snapshot>-2', … (free ones).",
    },
}
EXACT_KIND: Final[Schema] = {k: v for k, v in KIND.items() if k != "default"}
EXACT_SLOT: Final[Schema] = {k: v for k, v in SLOT.items() if k != "default"}
# WIDTHxHEIGHT or a named size; the relay checks the limits (relay/desktops/validation.py).
GEOMETRY_PATTERN: Final = (
    r"^([0-9]{2,5}x[0-9]{2,5}|vga|svga|xga|hd|wxga|sxga|hd\+|fhd|wuxga|qhd|4k)$"
)
VIRTUAL: Final = "virtual"
# The kinds an action may name and the relay kind each means.
KINDS: Final[dict[str, ops.DesktopKind]] = {
    "virtual": "virtual",
    "docker": "docker",
    "local": "local",
}


def _kind(args: dict[str, Any]) -> ops.DesktopKind:
    kind = KINDS.get(str(args.get("kind", VIRTUAL)))
    if kind is None:
        raise InvalidArgs("kind", f"must be one of {', '.join(KINDS)}")
    return kind


async def _tracked_relay(ctx: ActionContext, args: dict[str, Any]) -> None:
    """Resolve the relay and require exact session identity from it."""
    relay = await ctx.resolve_relay(args.get("relay"))
    if ctx.relays.is_connected(relay.relay_id) and not ctx.inventory.tracks(relay.relay_id):
        raise OpError(ErrorCode.UNAVAILABLE, "this relay does not report desktop session ids")
    await ctx.inventory.heal(relay.relay_id)


def _viewer_refusal(ctx: ActionContext, row: DesktopRow) -> OpError | None:
    """Why the caller gets no viewer of ``row``: an agent on a relay that denies apps."""
    capabilities = ctx.relays.capabilities(RelayId(row.relay_id))
    return agent_viewer_refusal(is_person(ctx.principal), capabilities)


def _viewer(ctx: ActionContext, row: DesktopRow) -> dict[str, Any]:
    """The viewer URL of ``row`` for the caller: a person's (cookie session) takes their
    input; an agent's (API token) is view only, enforced by the server (docs/viewing.md),
    and there is none on a relay that denies apps (``viewer_url`` null and the reason)."""
    if (refused := _viewer_refusal(ctx, row)) is not None:
        why = {"code": refused.code.value, "message": refused.message}
        return {"viewer_url": None, "viewer_expires_at": None, "viewer_refused": why}
    settings = ctx.settings
    grant = grant_for(
        ctx.principal.user_id,
        ctx.conversation_id,
        row.relay_id,
        row.desktop_session_id,
        settings.viewer_token_ttl_s,
        person=is_person(ctx.principal),
        minted_by=minted_ref(ctx.principal),
    )
    path = f"/vnc/{row.desktop_session_id}/{mint(settings.secret_key, grant)}/"
    if not grant.person:
        path += "?view_only=1"  # the page says so; the server drops the input regardless
    return {"viewer_url": _viewer_base(ctx) + path, "viewer_expires_at": grant.expires_at}


def _viewer_base(ctx: ActionContext) -> str:
    """What the viewer path is prefixed with: the public URL; without one, the listen address
    for an API token (an agent has no page to resolve a path against) and nothing for a web
    session (its page resolves the path against the address it was opened at, which may be
    another name of this server)."""
    if ctx.settings.public_url or ctx.principal.via == "token":
        return ctx.settings.public_base_url()
    return ""


def _desktop_reply(ctx: ActionContext, row: DesktopRow) -> dict[str, Any]:
    ctx.desktop_session_id = row.desktop_session_id
    return {"desktop": row.to_dict(), **_viewer(ctx, row)}


async def _live_row(
    ctx: ActionContext, args: dict[str, Any], cached: bool = False
) -> DesktopRow | None:
    """The live row the arguments name: by session id if given, else by (kind, slot).
    ``cached``: from the rows read a moment ago (a write anywhere drops them)."""
    session_id = args.get("desktop_session_id")
    if isinstance(session_id, str):
        ctx.desktop_session_id = session_id
        if cached:
            return await ctx.inventory.live_session(ctx.relay_id, session_id)
        row = await ctx.inventory.row(ctx.relay_id, session_id)
        return row if row is not None and row.can_stop else None
    where = (ctx.relay_id, _kind(args), str(args["slot"]))
    return await ctx.inventory.live_in_slot(*where, cached=cached)


async def running_row(ctx: ActionContext, args: dict[str, Any]) -> DesktopRow:
    """The running desktop the arguments name, like the screen tool: by session id, else the
    slot's live desktop of ``kind`` (``local: true`` means kind ``local``); else not_running."""
    if args.get("local"):
        args = {**args, "kind": "local"}
    _kind(args)
    relay = await ctx.resolve_relay(args.get("relay"))
    if ctx.relays.is_connected(relay.relay_id) and not ctx.inventory.tracks(relay.relay_id):
        raise OpError(ErrorCode.UNAVAILABLE, "this relay does not report desktop session ids")
    # Every action on a desktop asks this: a running row read a moment ago serves (a desktop
    # that stopped since answers not_running from the relay). Anything else is read afresh.
    row = await _live_row(ctx, args, cached=True)
    if row is not None and row.state == "paused":
        raise _paused(ctx, row)  # at once: nothing may wait on a frozen desktop
    if row is None or row.state != "running":
        # Rows a disconnect left unknown are healed only when they are in the way (the
        # common case, a running row, costs one read fewer).
        await ctx.inventory.heal(relay.relay_id)
        row = await _live_row(ctx, args)
    if row is not None and row.state == "paused":
        raise _paused(ctx, row)
    if row is None or row.state != "running":
        await _refuse_replaced(ctx, args)
        raise OpError(ErrorCode.NOT_RUNNING, "no running desktop there; start one first")
    ctx.desktop_session_id = row.desktop_session_id
    return row


async def _refuse_replaced(ctx: ActionContext, args: dict[str, Any]) -> None:
    """``desktop_changed`` (409, with the current session id) for the session id of a desktop
    a reset replaced, while its successor holds the slot; ``not_running`` with ``reason:
    reset`` while the slot holds none (docs/desktops.md, "Reset")."""
    session_id = args.get("desktop_session_id")
    if not isinstance(session_id, str):
        return
    old = await ctx.inventory.row(ctx.relay_id, session_id)
    if old is None or old.reason != "reset":
        return
    current = await ctx.inventory.live_in_slot(ctx.relay_id, old.kind, old.slot)
    if current is not None and current.desktop_session_id != session_id:
        raise OpError(
            ErrorCode.DESKTOP_CHANGED,
            "this desktop was reset: its slot holds a new desktop_session_id",
            {"current_session_id": current.desktop_session_id, "field": "desktop_session_id"},
        )
    # The relay's word that the old desktop ended can come a moment before the reset's answer
    # records the new one (or the new start failed): a viewer waits a while on this reason.
    raise OpError(
        ErrorCode.NOT_RUNNING,
        "this desktop was reset and its slot holds no new desktop yet",
        {"field": "desktop_session_id", "reason": "reset"},
    )


def _paused(ctx: ActionContext, row: DesktopRow) -> OpError:
    """The answer to an action on a paused desktop (409 ``paused``)."""
    ctx.desktop_session_id = row.desktop_session_id
    return OpError(
        ErrorCode.PAUSED,
        "this desktop is paused; resume it first (desktop_resume)",
        {"desktop_session_id": row.desktop_session_id},
    )


# -- handlers ------------------------------------------------------------------------------


async def list_active(ctx: ActionContext, args: dict[str, Any]) -> dict[str, Any]:
    probes: dict[str, str] = {}
    if args.get("probe"):
        probes = await _probe_visible(ctx)
    rows = await ctx.inventory.visible(ctx.conversation_id)
    return {"desktops": [row.to_dict() for row in rows], "probes": probes}


async def _probe_visible(ctx: ActionContext) -> dict[str, str]:
    relays = [
        r
        for r in await ctx.store.relays_visible_in(ctx.conversation_id)
        if ctx.relays.is_connected(r.relay_id) and ctx.inventory.tracks(r.relay_id)
    ]
    results = await asyncio.gather(
        *(ctx.inventory.probe(r.relay_id) for r in relays), return_exceptions=True
    )
    return {r.name: _probe_outcome(result) for r, result in zip(relays, results, strict=True)}


def _probe_outcome(result: object) -> str:
    if isinstance(result, OpError):
        return result.code.value
    return "failed" if isinstance(result, BaseException) else "ok"


async def _admit_start(ctx: ActionContext, kind: ops.DesktopKind, slot: str) -> None:
    """An agent may start a desktop in ``(kind, slot)`` unless a person's Stop holds it there,
    or a person holds the desktop already running there (a person always may)."""
    if is_person(ctx.principal):
        return
    row = await ctx.inventory.live_in_slot(ctx.relay_id, kind, slot, cached=True)
    if row is not None and row.state == "running":
        await admit_agent_input(ctx, DesktopTarget.of_row(row))
    else:
        await admit_agent_place(ctx, kind, slot)


async def start(ctx: ActionContext, args: dict[str, Any]) -> dict[str, Any]:
    if "snapshot" in args:
        from server.actions.snapshots import fork  # forks live with the snapshots

        return await fork(ctx, args)
    for fork_arg in ("count", "slots"):
        if fork_arg in args:
            raise InvalidArgs(fork_arg, "only with snapshot (forks of a snapshot)")
    await _tracked_relay(ctx, args)
    await _admit_start(ctx, _kind(args), str(args.get("slot", "main")))
    request = ops.DesktopStartArgs(kind=_kind(args), started_by=ctx.principal.username)
    for name in ("slot", "geometry", "depth", "audio", "profile", "persist_home"):
        if name in args:
            request[name] = args[name]
    result = await ctx.relay_call(ops.DESKTOP_START, request)
    row = await ctx.inventory.record_started(ctx.relay_id, result)
    already = bool(result.get("already_running"))
    ctx.outcome = "already_running" if already else "ok"
    extra: dict[str, Any] = {k: result[k] for k in ("profile", "persist_home") if k in result}
    from_pool = result.get("from_pool") is True
    if await _records(ctx, args):
        extra.update(await record(ctx, row))
        row = row.with_recording()
    return {**_desktop_reply(ctx, row), "already_running": already, "from_pool": from_pool, **extra}


async def _records(ctx: ActionContext, args: dict[str, Any]) -> bool:
    """``record`` as asked, else the conversation's default (docs/recording.md)."""
    if "record" in args:
        return bool(args["record"])
    recordings = ctx.parts.recordings
    return recordings is not None and await recordings.records_by_default(ctx.conversation_id)


async def record(ctx: ActionContext, row: DesktopRow) -> dict[str, Any]:
    """Record ``row``'s desktop in the caller's conversation (docs/recording.md)."""
    if ctx.parts.recordings is None:
        raise OpError(ErrorCode.UNAVAILABLE, "this server keeps no recordings")
    recording = await ctx.parts.recordings.turn_on(row, ctx.conversation_id, ctx.principal.username)
    return {"recording": True, "recording_id": recording.recording_id}


async def status(ctx: ActionContext, args: dict[str, Any]) -> dict[str, Any]:
    await _tracked_relay(ctx, args)
    rows = await ctx.inventory.probe(ctx.relay_id)
    return {"relay": ctx.relay.name if ctx.relay else None, "desktops": [r.to_dict() for r in rows]}


async def attach(ctx: ActionContext, args: dict[str, Any]) -> dict[str, Any]:
    await _tracked_relay(ctx, args)
    row = await _live_row(ctx, args)
    if row is not None and row.state == "unknown":
        raise OpError(ErrorCode.RELAY_UNREACHABLE, "the relay of this desktop is not connected")
    if row is None or row.state not in ("running", "paused"):
        await _refuse_replaced(ctx, args)
        raise OpError(ErrorCode.NOT_RUNNING, "no running desktop there; start one first")
    if (refused := _viewer_refusal(ctx, row)) is not None:
        ctx.desktop_session_id = row.desktop_session_id
        raise refused  # attach answers nothing but a viewer URL
    return _desktop_reply(ctx, row)


async def stop_request(ctx: ActionContext, args: dict[str, Any]) -> dict[str, Any]:
    await _tracked_relay(ctx, args)
    row = await _live_row(ctx, args)
    if row is None:
        raise OpError(ErrorCode.NOT_RUNNING, "no desktop is running there")
    ctx.desktop_session_id = row.desktop_session_id
    confirm = {
        "conversation_id": ctx.conversation_id,
        "relay": row.relay_id,
        "kind": row.kind,
        "slot": row.slot,
        "desktop_session_id": row.desktop_session_id,
    }
    return {
        "confirm_required": True,
        "desktop": row.to_dict(),
        "confirm": {"action": "desktop_stop_confirm", "args": confirm},
    }


async def stop_confirm(ctx: ActionContext, args: dict[str, Any]) -> dict[str, Any]:
    await _tracked_relay(ctx, args)
    session_id = str(args["desktop_session_id"])
    ctx.desktop_session_id = session_id
    observed = await ctx.inventory.row(ctx.relay_id, session_id)
    kind = _kind(args) if "kind" in args or observed is None else observed.kind
    slot = str(args.get("slot") or (observed.slot if observed else "main"))
    holder = await ctx.inventory.live_in_slot(ctx.relay_id, kind, slot)
    if holder is not None and holder.desktop_session_id != session_id:
        raise SessionConflict(holder.desktop_session_id)
    if holder is None:
        return await _compare_and_stop(ctx, kind, slot, session_id)
    async with agent_act(ctx, DesktopTarget.of_row(holder)):
        return await _compare_and_stop(ctx, kind, slot, session_id)


async def _compare_and_stop(
    ctx: ActionContext, kind: ops.DesktopKind, slot: str, session_id: str
) -> dict[str, Any]:
    """The relay's compare-and-stop under its lifecycle lock, and its answer recorded."""
    answer = await ctx.relay_call(
        ops.DESKTOP_STOP,
        ops.DesktopStopArgs(kind=kind, slot=slot, desktop_session_id=session_id),
    )
    if answer.get("conflict"):
        await ctx.inventory.record_ended(ctx.relay_id, session_id, "stopped", "replaced")
        raise SessionConflict(str(answer.get("current_session_id")))
    stopped = answer["stopped"]
    reason = f"stopped by {ctx.principal.username}" if stopped else "not_on_relay"
    row = await ctx.inventory.record_ended(ctx.relay_id, session_id, "stopped", reason)
    ctx.outcome = "stopped" if stopped else "was_not_running"
    body: dict[str, Any] = {"stopped": stopped, "was_running": stopped}
    if stopped:
        body["stopped_session_id"] = session_id
    if row is not None:
        body["desktop"] = row.to_dict()
    return body


async def pause(ctx: ActionContext, args: dict[str, Any]) -> dict[str, Any]:
    return await _pause_or_resume(ctx, args, ops.DESKTOP_PAUSE)


async def resume(ctx: ActionContext, args: dict[str, Any]) -> dict[str, Any]:
    return await _pause_or_resume(ctx, args, ops.DESKTOP_RESUME)


async def _pause_or_resume(
    ctx: ActionContext, args: dict[str, Any], op: ops.OpSpec[ops.DesktopPauseArgs, ops.RelayRow]
) -> dict[str, Any]:
    """Freeze or thaw the named desktop at its relay (compared by session id there, under its
    lock), and record the row it answers. An agent passes the control gate like any input."""
    await _tracked_relay(ctx, args)
    observed = await _live_row(ctx, args)
    if observed is None or observed.state not in ("running", "paused"):
        field = "desktop_session_id" if "desktop_session_id" in args else "slot"
        raise OpError(
            ErrorCode.NOT_RUNNING, f"no running desktop has this {field}", {"field": field}
        )
    ctx.desktop_session_id = observed.desktop_session_id
    request = ops.DesktopPauseArgs(
        kind=observed.kind, slot=observed.slot, desktop_session_id=observed.desktop_session_id
    )
    async with agent_act(ctx, DesktopTarget.of_row(observed)):
        result = await ctx.relay_call(op, request)
    row = await ctx.inventory.record_started(ctx.relay_id, result)
    ctx.outcome = row.state
    return {"desktop": row.to_dict()}


PAUSE_SCHEMA: Final = tool_schema(
    {"relay": RELAY, "kind": KIND, "slot": SLOT, "desktop_session_id": SESSION_ID}
)

DESKTOP_ACTIONS: Final[tuple[Action, ...]] = (
    Action(
        "desktop_list_active",
        "read",
        tool_schema(
            {
                "probe": {
                    "type": "boolean",
                    "default": False,
                    "description": (
                        "Ask every connected relay for its status first (slower, exact)."
                    ),
                }
            }
        ),
        "List the desktops running on the relays of this conversation (state, slot, session "
        "id, who started them). Use it before starting or stopping one.",
        list_active,
    ),
    Action(
        "desktop_start",
        "write",
        tool_schema(
            {
                "relay": RELAY,
                "kind": KIND,
                "slot": SLOT,
                "geometry": {
                    "type": "string",
                    "pattern": GEOMETRY_PATTERN,
                    "default": "1280x800",
                    "description": "Screen size WIDTHxHEIGHT (even numbers, 640x480 to "
                    "7680x4320, 1:2 to 4:1) or a name: vga, svga, xga, hd, wxga, sxga, "
                    "hd+, fhd, wuxga, qhd, 4k.",
                },
                "depth": {
                    "type": "integer",
                    "enum": [16, 24],
                    "default": 24,
                    "description": "Colour depth in bits.",
                },
                "audio": {
                    "type": "boolean",  # absent: the relay's default (docs/audio.md)
                    "description": "Capture the desktop's sound for the viewer.",
                },
                "profile": {
                    "type": "string",
                    "pattern": "^[a-z0-9][a-z0-9_-]{0,31}$",
                    "description": "Desktop profile: 'standard' (panel, browser, files, "
                    "editor, terminal) or 'minimal' (window manager and terminal); absent: "
                    "the relay's default.",
                },
                "persist_home": {
                    "type": "boolean",
                    "default": False,
                    "description": "Keep the home directory of this slot across stops "
                    "(files, browser profile); wipe it with desktop_reset_home.",
                },
                "record": {
                    "type": "boolean",
                    "description": "Record the desktop's screen and timeline from the start "
                    "(desktop_record turns it on or off later); absent: the conversation's "
                    "default (relaydesk admin set-conversation --record).",
                },
                **FORK_PROPERTIES,
            }
        ),
        "Start a desktop in a slot of a relay, or return the one already running there. "
        "Answers with the desktop row and a viewer_url to open it.",
        start,
        audit_op="desktop.start",
    ),
    Action(
        "desktop_status",
        "read",
        tool_schema({"relay": RELAY}),
        "Ask one relay which desktops it runs right now and update the inventory.",
        status,
    ),
    Action(
        "desktop_attach",
        "write",
        tool_schema({"relay": RELAY, "kind": KIND, "slot": SLOT, "desktop_session_id": SESSION_ID}),
        "Get a fresh viewer_url for a desktop that is already running (never starts one; "
        "answers not_running instead).",
        attach,
        audit_op="desktop.attach",
    ),
    Action(
        "desktop_stop_request",
        "read",
        tool_schema({"relay": RELAY, "kind": KIND, "slot": SLOT, "desktop_session_id": SESSION_ID}),
        "First step of stopping a desktop: shows exactly which desktop a stop would end. "
        "Nothing stops; confirm with desktop_stop_confirm and the returned args.",
        stop_request,
        audit_op="desktop.stop_request",
    ),
    Action(
        "desktop_stop_confirm",
        "write",
        tool_schema(
            {
                "relay": RELAY,
                "kind": EXACT_KIND,
                "slot": EXACT_SLOT,
                "desktop_session_id": SESSION_ID,
            },
            ("relay", "desktop_session_id"),
        ),
        "Stop the desktop whose desktop_session_id you observed, only if it still holds the "
        "slot: a newer desktop there answers session_conflict and keeps running; an empty "
        "slot answers was_running false.",
        stop_confirm,
        audit_op="desktop.stop_confirm",
    ),
    Action(
        "desktop_pause",
        "write",
        PAUSE_SCHEMA,
        "Pause a running desktop: every process of it is frozen (no CPU), its windows, "
        "clipboard and unsaved text kept. While paused, input and screen actions answer "
        "paused (409) and viewers show it paused; desktop_resume brings it back.",
        pause,
        audit_op="desktop.pause",
    ),
    Action(
        "desktop_resume",
        "write",
        PAUSE_SCHEMA,
        "Resume a paused desktop exactly as it was paused; viewers reconnect on their own.",
        resume,
        audit_op="desktop.resume",
    ),
)
