"""The snapshot actions: save a running desktop (``desktop_snapshot``), list and delete a
conversation's snapshots, start forks of one (``desktop_start {snapshot, count}``) and reset a
desktop in place (``desktop_reset``) — docs/desktops.md, "Snapshots and forks", "Reset".

A snapshot belongs to the conversation it was made in: the server keeps its metadata by
(conversation, name), and another conversation never sees it (``not_found``, as if it did not
exist). Its files stay on the relay that made it, so it starts forks on that relay only.
"""

from __future__ import annotations

import secrets
from typing import Any, Final

from server.actions.context import ActionContext
from server.actions.desktop import (
    KIND,
    RELAY,
    SESSION_ID,
    SLOT,
    _admit_start,
    _desktop_reply,
    _live_row,
    _records,
    _tracked_relay,
    running_row,
)
from server.actions.desktop import SNAPSHOT_NAME as NAME
from server.actions.desktop import record as record_desktop
from server.actions.registry import Action, tool_schema
from server.control.gate import DesktopTarget, agent_act
from server.db.errors import AlreadyExists
from server.db.records import SnapshotRecord
from wire.desktop_rows import SLOT_RE
from wire.errors import ErrorCode, InvalidArgs, OpError
from wire.snapshots import (
    DESKTOP_FORK,
    DESKTOP_RESET,
    DESKTOP_SNAPSHOT,
    DESKTOP_SNAPSHOT_DELETE,
    DesktopForkArgs,
    DesktopResetArgs,
    DesktopSnapshotArgs,
    SnapshotIdArgs,
)

# How long a relay is given beyond the request timeout: copying a home, starting forks.
SNAPSHOT_EXTRA_S: Final = 60.0
FORK_EXTRA_S_EACH: Final = 15.0


def _not_found(name: str, field: str) -> OpError:
    return OpError(
        ErrorCode.NOT_FOUND,
        f"{field}: this conversation has no snapshot named {name!r}",
        {"field": field},
    )


async def _owned(ctx: ActionContext, name: str, field: str) -> SnapshotRecord:
    """The conversation's own snapshot ``name``; anything else is not found."""
    record = await ctx.store.snapshot_named(ctx.conversation_id, name)
    if record is None:
        raise _not_found(name, field)
    return record


async def _on_its_relay(ctx: ActionContext, args: dict[str, Any], record: SnapshotRecord) -> None:
    """Resolve the snapshot's relay (the only one holding its files)."""
    await _tracked_relay(ctx, {**args, "relay": args.get("relay") or record.relay_id})
    if ctx.relay_id != record.relay_id:
        raise InvalidArgs(
            "relay",
            f"snapshot {record.name!r} is kept on another relay of this conversation; "
            "it starts desktops only there",
        )


# -- handlers ------------------------------------------------------------------------------


async def snapshot(ctx: ActionContext, args: dict[str, Any]) -> dict[str, Any]:
    name = str(args["name"])
    row = await running_row(ctx, args)
    if await ctx.store.snapshot_named(ctx.conversation_id, name) is not None:
        raise InvalidArgs("name", f"this conversation has a snapshot named {name!r} already")
    snapshot_id = secrets.token_hex(16)
    request = DesktopSnapshotArgs(
        desktop_session_id=row.desktop_session_id,
        snapshot_id=snapshot_id,
        kind=row.kind,
        slot=row.slot,
    )
    saved = await ctx.relay_call(DESKTOP_SNAPSHOT, request, SNAPSHOT_EXTRA_S)
    try:
        record = await ctx.store.add_snapshot(
            snapshot_id=snapshot_id,
            conversation_id=ctx.conversation_id,
            name=name,
            relay_id=ctx.relay_id,
            meta=dict(saved),
            created_by=ctx.principal.username,
        )
    except AlreadyExists as err:
        await ctx.relay_call(DESKTOP_SNAPSHOT_DELETE, SnapshotIdArgs(snapshot_id=snapshot_id))
        raise InvalidArgs(
            "name", f"this conversation has a snapshot named {name!r} already"
        ) from err
    return {"snapshot": record.to_dict(_relay_name(ctx))}


async def list_snapshots(ctx: ActionContext, args: dict[str, Any]) -> dict[str, Any]:
    records = await ctx.store.snapshots_of(ctx.conversation_id)
    names = {r.relay_id: r.name for r in await ctx.store.relays_visible_in(ctx.conversation_id)}
    return {"snapshots": [r.to_dict(names.get(r.relay_id)) for r in records]}


async def delete_snapshot(ctx: ActionContext, args: dict[str, Any]) -> dict[str, Any]:
    record = await _owned(ctx, str(args["name"]), "name")
    files_deleted = False
    try:
        await ctx.resolve_relay(record.relay_id)
        if ctx.relays.is_connected(ctx.relay_id):
            answer = await ctx.relay_call(
                DESKTOP_SNAPSHOT_DELETE, SnapshotIdArgs(snapshot_id=record.snapshot_id)
            )
            files_deleted = answer["deleted"]
    except OpError as err:  # the metadata goes regardless; the relay's files wait for it
        ctx.outcome = f"metadata_only:{err.code.value}"
    deleted = await ctx.store.delete_snapshot(ctx.conversation_id, record.name)
    return {"deleted": deleted, "name": record.name, "files_deleted": files_deleted}


async def fork(ctx: ActionContext, args: dict[str, Any]) -> dict[str, Any]:
    """``desktop_start`` with ``snapshot``: ``count`` desktops from it at once."""
    record = await _owned(ctx, str(args["snapshot"]), "snapshot")
    await _on_its_relay(ctx, args, record)
    slots = await _fork_slots(ctx, args, record.name)
    for slot in slots:
        await _admit_start(ctx, "virtual", slot)
    request = DesktopForkArgs(
        snapshot_id=record.snapshot_id, slots=slots, started_by=ctx.principal.username
    )
    if "audio" in args:
        request["audio"] = args["audio"]
    extra = FORK_EXTRA_S_EACH * min(len(slots), 8)
    answer = await ctx.relay_call(DESKTOP_FORK, request, extra)
    desktops = []
    recorded = await _records(ctx, args)
    for result in answer["desktops"]:
        row = await ctx.inventory.record_started(ctx.relay_id, result)
        recording: dict[str, Any] = {}
        if recorded:
            recording = await record_desktop(ctx, row)
            row = row.with_recording()
        desktops.append({**_desktop_reply(ctx, row), **recording})
    ctx.outcome = "ok" if not answer["failed"] else f"started {len(desktops)} of {len(slots)}"
    if not desktops and answer["failed"]:
        first = answer["failed"][0]
        codes = {c.value: c for c in ErrorCode}
        code = codes.get(first["code"], ErrorCode.START_FAILED)
        raise OpError(code, first["message"], {"failed": answer["failed"]})
    return {"snapshot": record.name, "desktops": desktops, "failed": answer["failed"]}


async def _fork_slots(ctx: ActionContext, args: dict[str, Any], name: str) -> list[str]:
    """The slots of the forks: given (``slots``), or ``name-1``, ``name-2``, … skipping
    slots that hold a desktop."""
    count = args.get("count")
    given = args.get("slots")
    if given is not None:
        if not given or not all(isinstance(s, str) and SLOT_RE.fullmatch(s) for s in given):
            raise InvalidArgs("slots", f"a list of slots, each matching ^{SLOT_RE.pattern}$")
        if len(set(given)) != len(given):
            raise InvalidArgs("slots", "each slot once")
        if count is not None and count != len(given):
            raise InvalidArgs("count", f"is {count} but {len(given)} slots are given")
        return list(given)
    count = 1 if count is None else int(count)
    live = await ctx.inventory.visible(ctx.conversation_id)
    taken = {r.slot for r in live if r.relay_id == ctx.relay_id and r.kind == "virtual"}
    slots: list[str] = []
    index = 1
    while len(slots) < count:
        slot = f"{name}-{index}"[:32]
        if slot not in taken:
            slots.append(slot)
        index += 1
    return slots


async def reset(ctx: ActionContext, args: dict[str, Any]) -> dict[str, Any]:
    await _tracked_relay(ctx, args)
    observed = await _live_row(ctx, args)
    if observed is None or observed.state not in ("running", "paused"):
        field = "desktop_session_id" if "desktop_session_id" in args else "slot"
        raise OpError(
            ErrorCode.NOT_RUNNING, f"no running desktop has this {field}", {"field": field}
        )
    ctx.desktop_session_id = observed.desktop_session_id
    request = DesktopResetArgs(
        desktop_session_id=observed.desktop_session_id,
        kind=observed.kind,
        slot=observed.slot,
        started_by=ctx.principal.username,
    )
    if "snapshot" in args:
        record = await _owned(ctx, str(args["snapshot"]), "snapshot")
        if record.relay_id != ctx.relay_id:
            raise InvalidArgs(
                "snapshot",
                f"snapshot {record.name!r} is kept on another relay of this "
                "conversation; it resets desktops only there",
            )
        request["snapshot_id"] = record.snapshot_id
    async with agent_act(ctx, DesktopTarget.of_row(observed)):
        result = await ctx.relay_call(DESKTOP_RESET, request, FORK_EXTRA_S_EACH)
    old = observed.desktop_session_id
    await ctx.inventory.record_ended(ctx.relay_id, old, "stopped", RESET_REASON)
    row = await ctx.inventory.record_started(ctx.relay_id, result)
    ctx.outcome = "reset"
    from_pool = result.get("from_pool") is True  # a fresh start taken from the warm pool
    return {**_desktop_reply(ctx, row), "replaced_session_id": old, "from_pool": from_pool}


RESET_REASON: Final = "reset"


def _relay_name(ctx: ActionContext) -> str | None:
    return ctx.relay.name if ctx.relay is not None else None


SNAPSHOT_ACTIONS: Final[tuple[Action, ...]] = (
    Action(
        "desktop_snapshot",
        "write",
        tool_schema(
            {
                "relay": RELAY,
                "kind": KIND,
                "slot": SLOT,
                "desktop_session_id": SESSION_ID,
                "name": NAME,
            },
            ("name",),
        ),
        "Save a running desktop as a named snapshot of this conversation: its home (the "
        "desktop user's files), profile, geometry, and the apps running with their window "
        "geometry. Start copies of it with desktop_start {snapshot, count}, or put a desktop "
        "back to it with desktop_reset. Kept on the desktop's relay, which alone restores it.",
        snapshot,
        audit_op="desktop.snapshot",
    ),
    Action(
        "desktop_snapshots",
        "read",
        tool_schema({}),
        "List this conversation's desktop snapshots (name, relay, profile, geometry, apps, size).",
        list_snapshots,
    ),
    Action(
        "desktop_snapshot_delete",
        "write",
        tool_schema({"name": NAME}, ("name",)),
        "Delete one of this conversation's desktop snapshots (desktops started from it keep "
        "running with their own copies).",
        delete_snapshot,
        audit_op="desktop.snapshot_delete",
    ),
    Action(
        "desktop_reset",
        "write",
        tool_schema(
            {
                "relay": RELAY,
                "kind": KIND,
                "slot": SLOT,
                "desktop_session_id": SESSION_ID,
                "snapshot": {
                    **NAME,
                    "description": "Snapshot to put the desktop back to; "
                    "absent: a fresh start of the desktop's profile.",
                },
            }
        ),
        "Put a running desktop back to a snapshot (or a fresh start of its profile) in place: "
        "same slot, a new desktop_session_id (the old one then answers desktop_changed); "
        "viewers follow on their own.",
        reset,
        audit_op="desktop.reset",
    ),
)
