"""``Inventory``: the canonical desktop inventory, fed only by what relays say.

Sources (docs/architecture.md, "Inventory and actions"): results of ``desktop.start`` /
``desktop.stop``, ``desktop.status`` probes,
``desktop.changed`` events and the ``hello`` reconciliation. Changes of one relay's rows are
serialised by a per-relay lock, and listeners hear about them in that order.

What a relay says is a claim, bounded before it is stored: every row passes
``wire.desktop_rows.check_row`` (a bad one is refused and logged, the rest of the report goes
on), a relay has at most ``max_rows`` live rows, and failures of desktops never seen are kept
only while the relay's history is under ``HISTORY_PER_ROW`` times that. ``started_by`` is the
server's own record: the user of the action whose start result reported the desktop
(:meth:`Inventory.acting_for`), never the relay's word.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, Protocol

from server.db.base import Clock, utc_now
from server.db.rows import LIVE_STATES, DesktopRow, RowAnnotator, RowListener
from server.relays.calls import call
from wire import ops
from wire.desktop_rows import MAX_REASON, SESSION_ID_RE, check_row
from wire.errors import ErrorCode, OpError
from wire.ids import RelayId
from wire.messages import Event, Hello
from wire.ops import DesktopState

log = logging.getLogger(__name__)

SESSION_IDENTITY = "session_identity"
TERMINAL_STATES = frozenset({"stopped", "failed"})
KNOWN_STATES = frozenset(LIVE_STATES | TERMINAL_STATES)
DEFAULT_MAX_ROWS = 64
# A relay's rows of every state (its history within the retention) may be this many times its
# live rows before failures of desktops the inventory never saw stop being recorded.
HISTORY_PER_ROW = 16
RELAY_RESTARTED = "relay_restarted"
NOT_ON_RELAY = "not_on_relay"
REPLACED = "replaced"
# The reason ``mark_relay_unknown`` gives: nothing could confirm the row while its relay was away.
RELAY_DISCONNECTED = "relay_disconnected"

BatchListener = Callable[[RelayId, list[DesktopRow]], Awaitable[None]]


class InventoryPersistence(Protocol):
    """The ``Store`` methods the inventory uses (``server.db.inventory``)."""

    async def upsert_desktops(self, rows: Sequence[DesktopRow]) -> None: ...

    async def desktop(self, relay_id: str, desktop_session_id: str) -> DesktopRow | None: ...

    async def desktops_for_relay(
        self, relay_id: str, states: Sequence[str] | None = None
    ) -> list[DesktopRow]: ...

    async def cached_desktops_for_relay(
        self, relay_id: str, states: Sequence[str]
    ) -> list[DesktopRow]: ...

    async def visible_desktops(
        self, conversation_id: str, states: Sequence[str] = ...
    ) -> list[DesktopRow]: ...

    async def mark_relay_unknown(self, relay_id: str) -> list[DesktopRow]: ...

    async def prune_history(self, older_than: datetime) -> int: ...


class RelayRequests(Protocol):
    """The ``RelayHub`` methods the inventory uses."""

    def capabilities(self, relay_id: RelayId) -> frozenset[str]: ...

    async def request(
        self, relay_id: RelayId, op: str, args: dict[str, Any] | None = None, timeout_s: float = ...
    ) -> Any: ...


def _is_after(updated_at: str, moment: datetime) -> bool:
    return datetime.fromisoformat(updated_at.replace("Z", "+00:00")) > moment


def _text(data: Mapping[str, Any], key: str, default: str | None = None) -> str | None:
    value = data.get(key, default)
    return value if isinstance(value, str) else default


def row_from_relay(
    relay_id: str, data: Mapping[str, Any], state: DesktopState, now: str
) -> DesktopRow:
    """A row from what a relay reported (``started_by`` left empty: never the relay's word);
    ``invalid_args`` naming the first field that does not fit (``wire.desktop_rows``)."""
    reported = check_row(data)
    return DesktopRow(
        relay_id=relay_id,
        desktop_session_id=reported.desktop_session_id,
        kind=reported.kind,
        slot=reported.slot,
        state=state,
        started_at=reported.started_at,
        started_by=None,
        updated_at=now,
        reason=reported.reason,
        geometry=reported.geometry,
        display=reported.display,
    )


def _same_running(old: DesktopRow, new: DesktopRow) -> bool:
    """``old`` already records ``new`` (running or paused), started by the same user, for the
    same reason (a running desktop's ``reason`` names the session programs that failed)."""
    return old.state == new.state and old.started_by == new.started_by and old.reason == new.reason


def reported_state(data: Mapping[str, Any]) -> DesktopState:
    """A reported desktop runs, or is paused, unless the relay itself cannot confirm it
    (``unknown``: a relay reports its local desktop so while its host helper does not answer).
    """
    state = data.get("state")
    return state if state == "unknown" or state == "paused" else "running"


class Inventory:
    """The server's desktop inventory: a ``RelayObserver`` and a ``DesktopDirectory``."""

    def __init__(
        self,
        store: InventoryPersistence,
        relays: RelayRequests,
        *,
        clock: Clock = utc_now,
        probe_timeout_s: float = 10.0,
        max_rows: int = DEFAULT_MAX_ROWS,
    ) -> None:
        self._store = store
        self._relays = relays
        self._clock = clock
        self.probe_timeout_s = probe_timeout_s
        self.max_rows = max_rows
        # Who a start result recorded through this inventory was started by (``acting_for``).
        self._acting_user: str | None = None
        self._locks: defaultdict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._listeners: list[RowListener] = []
        self._annotate: RowAnnotator | None = None
        self._batch_listeners: list[BatchListener] = []
        self._event_handlers: dict[str, Callable[[RelayId, dict[str, Any]], Awaitable[None]]] = {
            "desktop.changed": self._desktop_changed,
        }

    # -- DesktopDirectory ---------------------------------------------------------------

    def add_listener(self, listener: RowListener) -> None:
        """Call ``listener`` with each changed row, after the change is stored."""
        self._listeners.append(listener)

    def use_control(self, annotate: RowAnnotator) -> None:
        """Listed rows (``visible``) carry who is in control of each desktop."""
        self._annotate = annotate

    def add_batch_listener(self, listener: BatchListener) -> None:
        """Call ``listener`` once per change of one relay's rows (the event stream uses it)."""
        self._batch_listeners.append(listener)

    def acting_for(self, username: str) -> Inventory:
        """This inventory as one action of ``username`` uses it: a desktop a start result
        reports through it is recorded as started by them (same rows, locks and listeners)."""
        acting = copy.copy(self)
        acting._acting_user = username
        return acting

    # -- reads --------------------------------------------------------------------------

    async def visible(self, conversation_id: str) -> list[DesktopRow]:
        """Live rows of the relays shared with the conversation, with their control state."""
        rows = await self._store.visible_desktops(conversation_id)
        stale = {r.relay_id for r in rows if self._is_stale_unknown(r)}
        if stale:
            for relay_id in sorted(stale):
                await self.heal(relay_id)
            rows = await self._store.visible_desktops(conversation_id)
        return await self._annotate(rows) if self._annotate is not None else rows

    async def heal(self, relay_id: str) -> None:
        """Rows left ``unknown`` while their relay is in fact connected here (another server
        process marked them, or a disconnect raced a reconnect) are probed at once."""
        if not self.tracks(RelayId(relay_id)):
            return
        unknown = await self._store.desktops_for_relay(relay_id, ("unknown",))
        if not any(self._is_stale_unknown(row) for row in unknown):
            return
        log.info("relay %s is connected but has unknown desktops: probing it", relay_id)
        try:
            await self.probe(RelayId(relay_id))
        except OpError as err:
            log.info("relay %s could not confirm its desktops: %s", relay_id, err.message)

    def _is_stale_unknown(self, row: DesktopRow) -> bool:
        return (
            row.state == "unknown"
            and row.reason == RELAY_DISCONNECTED
            and self.tracks(RelayId(row.relay_id))
        )

    async def live_rows(self, relay_id: str) -> list[DesktopRow]:
        return await self._store.desktops_for_relay(relay_id, tuple(LIVE_STATES))

    async def row(self, relay_id: str, desktop_session_id: str) -> DesktopRow | None:
        return await self._store.desktop(relay_id, desktop_session_id)

    async def live_in_slot(
        self, relay_id: str, kind: str, slot: str, *, cached: bool = False
    ) -> DesktopRow | None:
        """The live row holding ``(kind, slot)`` on the relay, if any; ``cached``: as read at
        most a moment ago (a write of rows anywhere drops it)."""
        for row in await self._live(relay_id, cached):
            if row.kind == kind and row.slot == slot:
                return row
        return None

    async def live_session(self, relay_id: str, desktop_session_id: str) -> DesktopRow | None:
        """The live row of ``desktop_session_id`` as read at most a moment ago, if any."""
        for row in await self._live(relay_id, cached=True):
            if row.desktop_session_id == desktop_session_id:
                return row
        return None

    async def _live(self, relay_id: str, cached: bool) -> list[DesktopRow]:
        if cached:
            return await self._store.cached_desktops_for_relay(relay_id, tuple(LIVE_STATES))
        return await self.live_rows(relay_id)

    def tracks(self, relay_id: RelayId) -> bool:
        """True when the relay announced ``session_identity`` (only those are inventoried)."""
        return SESSION_IDENTITY in self._relays.capabilities(relay_id)

    # -- RelayObserver ------------------------------------------------------------------

    async def relay_connected(self, relay_id: RelayId, hello: Hello) -> None:
        if SESSION_IDENTITY not in hello.capabilities:
            log.info("relay %s has no session identity: kept out of the inventory", relay_id)
            return
        await self.reconcile(relay_id, hello.desktops, since=None, missing_reason=RELAY_RESTARTED)

    async def relay_disconnected(self, relay_id: RelayId) -> None:
        async with self._locks[relay_id]:
            changed = await self._store.mark_relay_unknown(relay_id)
            await self._notify(relay_id, changed)

    async def relay_event(self, relay_id: RelayId, event: Event) -> None:
        handler = self._event_handlers.get(event.name)
        if handler is not None and self.tracks(relay_id):
            await handler(relay_id, event.data)

    # -- authoritative updates ------------------------------------------------------------

    async def probe(self, relay_id: RelayId) -> list[DesktopRow]:
        """Ask the relay for ``desktop.status`` and reconcile; returns the relay's live rows."""
        since = self._clock()
        result = await call(
            self._relays, relay_id, ops.DESKTOP_STATUS, ops.Empty(), self.probe_timeout_s
        )
        rows = result.get("desktops")
        if not isinstance(rows, list):
            raise OpError(ErrorCode.INTERNAL, "relay answered desktop.status without desktops")
        await self.reconcile(relay_id, rows, since=since, missing_reason=NOT_ON_RELAY)
        return await self.live_rows(relay_id)

    async def reconcile(
        self,
        relay_id: RelayId,
        reported: Sequence[Mapping[str, Any]],
        *,
        since: datetime | None,
        missing_reason: str,
    ) -> list[DesktopRow]:
        """Reported rows become running; live rows not reported become stopped.

        ``since`` is when the report was asked for: rows changed after it are newer than the
        report and left alone. ``None`` (``hello``) makes the report win outright.
        """
        async with self._locks[relay_id]:
            now = self._now()
            live = {r.desktop_session_id: r for r in await self.live_rows(relay_id)}
            fresh = self._checked(relay_id, reported, now)
            changed = await self._reported_rows(relay_id, fresh, live, since)
            seen = {r.desktop_session_id for r in fresh}
            for session_id, old in live.items():
                if session_id not in seen and not (since and _is_after(old.updated_at, since)):
                    changed.append(
                        replace(old, state="stopped", reason=missing_reason, updated_at=now)
                    )
            await self._store.upsert_desktops(changed)
            await self._notify(relay_id, changed)
            return changed

    async def record_started(self, relay_id: RelayId, result: Mapping[str, Any]) -> DesktopRow:
        """Store a ``desktop.start`` result (or a live row a pause or resume answered); a
        different live row in that slot is replaced."""
        async with self._locks[relay_id]:
            now = self._now()
            row = row_from_relay(relay_id, result, reported_state(result), now)
            old = await self.row(relay_id, row.desktop_session_id)
            if old is not None and old.state in TERMINAL_STATES:
                return old  # the watchdog's failure overtook the start result
            row = replace(row, started_by=(old.started_by if old else None) or self._acting_user)
            live = await self.live_rows(relay_id)
            displaced = [
                replace(r, state="stopped", reason=REPLACED, updated_at=now)
                for r in live
                if (r.kind, r.slot) == (row.kind, row.slot)
                and r.desktop_session_id != row.desktop_session_id
            ]
            if old is None and len(live) - len(displaced) >= self.max_rows:
                raise self._over_limit()
            unchanged = old if old is not None and _same_running(old, row) else None
            changed = displaced if unchanged else [*displaced, row]
            await self._store.upsert_desktops(changed)
            await self._notify(relay_id, changed)
            if unchanged is not None:
                return unchanged
            return await self.row(relay_id, row.desktop_session_id) or row

    async def record_ended(
        self, relay_id: RelayId, desktop_session_id: str, state: DesktopState, reason: str
    ) -> DesktopRow | None:
        """Mark a live row ``stopped`` or ``failed``; returns the row as it is now."""
        async with self._locks[relay_id]:
            old = await self.row(relay_id, desktop_session_id)
            if old is None or old.state in TERMINAL_STATES:
                return old
            row = replace(old, state=state, reason=reason, updated_at=self._now())
            await self._store.upsert_desktops([row])
            await self._notify(relay_id, [row])
            return row

    async def forget_connections(self, relay_ids: Iterable[RelayId]) -> None:
        """Server start: rows of relays not (yet) connected can only be ``unknown``."""
        for relay_id in relay_ids:
            await self.relay_disconnected(relay_id)

    async def prune_history(self, older_than: datetime) -> int:
        return await self._store.prune_history(older_than)

    # -- internals ----------------------------------------------------------------------

    def _now(self) -> str:
        return self._clock().isoformat()

    def _over_limit(self) -> OpError:
        return OpError(
            ErrorCode.LIMIT_REACHED,
            f"at most {self.max_rows} desktops per relay (RELAYDESK_MAX_DESKTOPS_PER_RELAY)",
            {"max_desktops": self.max_rows},
        )

    def _checked(self, relay_id: RelayId, reported: Sequence[object], now: str) -> list[DesktopRow]:
        """The reported rows that fit (``wire.desktop_rows``), one per session, at most
        ``max_rows`` of them; what is refused or dropped is logged once."""
        rows: dict[str, DesktopRow] = {}
        refused: list[str] = []
        for index, data in enumerate(reported):
            if len(rows) == self.max_rows:
                log.warning(
                    "relay %s reported %d more desktops than RELAYDESK_MAX_DESKTOPS_PER_RELAY "
                    "(%d): dropped",
                    relay_id,
                    len(reported) - index,
                    self.max_rows,
                )
                break
            try:
                if not isinstance(data, Mapping):
                    raise OpError(ErrorCode.INVALID_ARGS, "a row must be an object")
                row = row_from_relay(relay_id, data, reported_state(data), now)
            except OpError as err:
                refused.append(err.message)
                continue
            rows.setdefault(row.desktop_session_id, row)
        if refused:
            first = refused[0]
            log.warning("relay %s: %d desktop row(s) refused: %s", relay_id, len(refused), first)
        return list(rows.values())

    async def _reported_rows(
        self,
        relay_id: RelayId,
        reported: list[DesktopRow],
        live: dict[str, DesktopRow],
        since: datetime | None,
    ) -> list[DesktopRow]:
        changed: list[DesktopRow] = []
        for fresh in reported:
            old = live.get(fresh.desktop_session_id) or await self.row(
                relay_id, fresh.desktop_session_id
            )
            if old is not None and since is not None and _is_after(old.updated_at, since):
                continue
            if old is not None and (old.state, old.reason) == (fresh.state, fresh.reason):
                continue
            changed.append(replace(fresh, started_by=old.started_by if old else None))
        return changed

    async def _desktop_changed(self, relay_id: RelayId, data: dict[str, Any]) -> None:
        state = data.get("state")
        session_id = data.get("desktop_session_id")
        if not isinstance(session_id, str) or not SESSION_ID_RE.fullmatch(session_id):
            session_id = None
        if state not in KNOWN_STATES or session_id is None:
            log.warning(
                "relay %s sent desktop.changed without a known state or a valid session id",
                relay_id,
            )
            return
        try:
            if state == "stopped" or state == "failed":
                reason = (_text(data, "reason") or state)[:MAX_REASON]
                ended = await self.record_ended(relay_id, session_id, state, reason)
                if ended is None:
                    await self._record_unseen(relay_id, data, state)
            elif state in ("running", "starting", "paused"):
                await self.record_started(relay_id, data)
        except OpError as err:
            log.warning("relay %s: desktop.changed refused: %s", relay_id, err.message)

    async def _record_unseen(
        self, relay_id: RelayId, data: dict[str, Any], state: DesktopState
    ) -> None:
        """A failure of a desktop the inventory never saw still belongs to its history (while
        the relay's history is under its bound)."""
        async with self._locks[relay_id]:
            row = row_from_relay(relay_id, data, state, self._now())
            history = await self._store.desktops_for_relay(relay_id)
            if len(history) >= self.max_rows * HISTORY_PER_ROW:
                raise OpError(ErrorCode.LIMIT_REACHED, "too many desktops in the relay's history")
            await self._store.upsert_desktops([row])
            await self._notify(relay_id, [row])

    async def _notify(self, relay_id: RelayId, changed: list[DesktopRow]) -> None:
        if not changed:
            return
        for row in changed:
            for listener in self._listeners:
                await self._call(listener(row))
        for batch in self._batch_listeners:
            await self._call(batch(relay_id, changed))

    @staticmethod
    async def _call(awaitable: Awaitable[None]) -> None:
        try:
            await awaitable
        except Exception:
            log.exception("inventory listener failed")
