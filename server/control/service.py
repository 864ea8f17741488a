"""``ControlService``: the control state of every desktop, and what changes it.

It applies the rules of ``server.control.model`` through the ``ControlStore`` (so several
replicas agree), publishes every change once (``server.control.publish``), audits grants,
wakes up when a lock lapses or a grant expires, and ends agent requests in flight when a
person presses Stop — here, or on another replica (the stop goes over the event bus).

A person's input (``person_input``) is the hot path of every viewer stream: it only notes the
input in memory and returns; a writer task per desktop stores it at once and then at most
every ``PERSON_WRITE_INTERVAL_S`` while input continues. An agent admitted on this replica
meanwhile sees the noted input too, so locally nothing waits for the write.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, Generic, NoReturn, TypeVar

from server.control.approvals import SafetyApprovals
from server.control.audit import AuditContext, AuditQueue, GrantAudit, grant_details
from server.control.inflight import InFlight
from server.control.model import (
    IDLE,
    AgentRequest,
    Cooldown,
    DesktopControl,
    DesktopKey,
    Grant,
    Refused,
    admit,
    cool_down,
    cooled_down,
    hand_back,
    next_change,
    note_person,
    signature,
    stop_agents,
    sweep,
    take,
    view,
)
from server.control.policy import PolicyBook
from server.control.publish import ControlPublisher, SharingStore, desktop_topic
from server.control.store import ControlStore
from server.db.rows import ControlInfo, DesktopDirectory, DesktopRow
from server.events.bus import EventBus
from server.tasks import cancel_and_wait
from wire.errors import OpError
from wire.ids import RelayId
from wire.messages import Event, Hello

log = logging.getLogger(__name__)

T = TypeVar("T")
Rule = Callable[[DesktopControl, float], tuple[DesktopControl, T]]

PERSON_WRITE_INTERVAL_S: Final = 0.2
# The relay event of a person's input on its host's real screen (the host helper's XInput2
# watch, docs/control.md), and the name such a person is shown with.
PERSON_INPUT_EVENT: Final = "desktop.person_input"
SCREEN_PERSON: Final = "someone at the relay host"
RETRY_S: Final = 1.0
ENDED_STATES: Final = frozenset({"stopped", "failed"})


@dataclass(frozen=True)
class PersonInput:
    name: str
    user_id: str | None
    at: float
    named: bool


Releaser = Callable[[DesktopKey], Coroutine[Any, Any, None]]
# What Stop did to a desktop's record: the grants it revoked, the cooldowns it set.
StopResult = tuple[list[Grant], dict[str, Cooldown]]


@dataclass(frozen=True)
class Applied(Generic[T]):
    """What one change did: the rule's result, grants that expired, the state after it."""

    result: T
    expired: list[Grant]
    info: ControlInfo
    changed: bool
    next_at: float | None


@dataclass(frozen=True)
class Stopped:
    """What Stop did: the grants it revoked and the requests it ended here."""

    revoked: list[Grant]
    cancelled: int
    info: ControlInfo


def _same(record: DesktopControl, now: float) -> tuple[DesktopControl, None]:
    return record, None


class ControlService:
    """The control state of desktops, shared through ``store``."""

    def __init__(
        self,
        store: ControlStore,
        policies: PolicyBook,
        bus: EventBus,
        sharing: SharingStore,
        audit: AuditQueue,
        *,
        directory: DesktopDirectory | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.policies = policies
        self.idle_s = policies.default.takeover_idle_s
        self.inflight = InFlight()
        self.publisher = ControlPublisher(bus, sharing)
        # Told of every change of who is in control, synchronously (they never wait): the
        # recordings' timeline (server/recordings/service.py).
        self.state_listeners: list[Callable[[DesktopKey, ControlInfo], None]] = []
        # A model's safety checks waiting for a person (the computer-use doors).
        self.approvals = SafetyApprovals(bus, store, clock)
        self._bus = bus
        self._audit = GrantAudit(audit)
        self._clock = clock
        self._directory = directory
        self._pending: dict[DesktopKey, PersonInput] = {}
        self._writers: dict[DesktopKey, asyncio.Task[None]] = {}
        self._timers: dict[DesktopKey, tuple[float, asyncio.Task[None]]] = {}
        self._listener: asyncio.Task[None] | None = None
        # Lets go of what an agent left held on a desktop (its relay's ``input.release``).
        self._releaser: Releaser | None = None
        self._released: set[DesktopKey] = set()
        self._releases: set[asyncio.Task[None]] = set()

    def use_releaser(self, releaser: Releaser) -> None:
        """How to let go of the buttons and keys an agent left held on a desktop: called,
        without waiting, when Stop is pressed and when a person takes the desktop."""
        self._releaser = releaser

    def _release_held(self, key: DesktopKey) -> None:
        if self._releaser is None:
            return
        task = asyncio.create_task(self._releaser(key), name="control-release-held")
        self._releases.add(task)
        task.add_done_callback(self._releases.discard)

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self, *, replicas: bool = False) -> None:
        """Start publishing, and (``replicas``: several server processes share the bus)
        listening for Stop pressed on other replicas."""
        self.publisher.start()
        if replicas:
            self._listener = asyncio.create_task(self._listen_stops(), name="control-stops")

    async def aclose(self) -> None:
        """Stop the listener, the timers and the writers; publish what is pending."""
        tasks = [*self._writers.values(), *(task for _, task in self._timers.values())]
        if self._listener is not None:
            tasks.append(self._listener)
        await cancel_and_wait(*tasks)
        await self.publisher.aclose()
        await self.store.close()

    # -- people ------------------------------------------------------------------------------

    def person_input(
        self, key: DesktopKey, name: str, user_id: str | None, *, named: bool = True
    ) -> None:
        """A person's input on ``key`` just now (never waits)."""
        earlier = self._pending.get(key)
        if earlier is not None and earlier.named and not named:
            name, user_id, named = earlier.name, earlier.user_id, True
        self._pending[key] = PersonInput(name, user_id, self._clock(), named)
        if key not in self._writers:
            self._writers[key] = asyncio.create_task(self._write_person(key))

    async def _write_person(self, key: DesktopKey) -> None:
        try:
            while key in self._pending:
                try:
                    await self._apply(key, _same)
                except OpError as err:
                    log.warning("cannot store a person's input: %s", err.message)
                await asyncio.sleep(PERSON_WRITE_INTERVAL_S)
        finally:
            self._writers.pop(key, None)

    async def take(self, key: DesktopKey, name: str, user_id: str | None) -> ControlInfo:
        """ "Take control": ``name`` holds the desktop until they hand it back."""
        applied = await self._apply(
            key, lambda record, now: (take(record, name, user_id, now), None)
        )
        return applied.info

    async def hand_back(self, key: DesktopKey) -> ControlInfo:
        """ "Hand back": agents may act again (a person's new input takes it again)."""
        applied = await self._apply(key, lambda record, now: (hand_back(record), None))
        return applied.info

    # -- agents ------------------------------------------------------------------------------

    async def admit(
        self,
        key: DesktopKey,
        request: AgentRequest,
        *,
        place: DesktopKey | None = None,
        relay_name: str | None = None,
        context: AuditContext | None = None,
    ) -> Grant:
        """The grant the agent's input runs under, or ``OpError`` (takeover_active,
        stopped_by_user, stale_screen for another window). ``place`` (``model.place_key``):
        where the desktop runs, whose Stop cooldowns hold for it too."""
        policy = self.policies.for_relay(key.relay_id, relay_name)
        cooled = (await self._place(place)).cooldowns
        applied = await self._apply(
            key, lambda record, now: admit(cool_down(record, cooled), request, now, policy)
        )
        outcome = applied.result
        if isinstance(outcome, Refused):
            await self._refuse(key, request, outcome, context)
        if outcome.created:
            await self._audit.record(
                "created", key, request.agent_name, grant_details(outcome.grant), None, context
            )
        return outcome.grant

    async def admit_place(
        self, place: DesktopKey, request: AgentRequest, *, context: AuditContext | None = None
    ) -> None:
        """May the agent act in ``place`` (start a desktop there)? ``OpError``
        ``stopped_by_user`` while a Stop's cooldown of it runs there."""
        refused = cooled_down(await self._place(place), request.agent_id, self._clock())
        if refused is not None:
            await self._refuse(place, request, refused, context)

    async def _refuse(
        self,
        key: DesktopKey,
        request: AgentRequest,
        refused: Refused,
        context: AuditContext | None,
    ) -> NoReturn:
        """Audit a refused grant, then raise the refusal."""
        if refused.minting:
            details = {
                "agent": request.agent_name,
                "scope": request.scope,
                "window_id": request.window_id,
            }
            code = refused.code.value
            await self._audit.record("refused", key, request.agent_name, details, code, context)
        raise OpError(refused.code, refused.message, dict(refused.details))

    async def _place(self, place: DesktopKey | None) -> DesktopControl:
        """The record of a place (``model.place_key``): only Stop's cooldowns live there."""
        if place is None:
            return DesktopControl()
        (record,) = await self.store.read_many([place])
        return record

    async def stop(
        self,
        key: DesktopKey,
        by: str,
        agent_id: str | None = None,
        context: AuditContext | None = None,
        *,
        place: DesktopKey | None = None,
    ) -> Stopped:
        """Stop: revoke the grants, cancel the requests in flight (on every replica), and
        refuse new grants to those agents for the cooldown, on this desktop and in its
        ``place`` (a desktop started there again is refused to them as well)."""
        cooldown = self.policies.for_relay(key.relay_id).regrant_cooldown_s

        def rule(record: DesktopControl, now: float) -> tuple[DesktopControl, StopResult]:
            record, revoked = stop_agents(record, by, now, cooldown, agent_id)
            stopped = {grant.agent_id for grant in revoked} | ({agent_id} if agent_id else set())
            return record, (revoked, {agent: record.cooldowns[agent] for agent in stopped})

        applied = await self._apply(key, rule)
        revoked, cooldowns = applied.result
        if place is not None:
            await self._cool_place(place, cooldowns)
        self._release_held(key)
        # Stop of "the agent" ends every agent request on the desktop; of one agent, its own.
        agents = [agent_id] if agent_id else None
        cancelled = self.inflight.cancel(key, by, agent_id)
        data = {
            "relay_id": key.relay_id,
            "desktop_session_id": key.desktop_session_id,
            "agents": agents,
            "by": by,
        }
        if self._listener is not None:
            try:
                await self.store.announce_stop(data)
            except OpError as err:
                log.warning("other replicas did not hear of a Stop: %s", err.message)
        for grant in revoked:
            await self._audit.record(
                "revoked", key, by, grant_details(grant), "stopped_by_user", context
            )
        return Stopped(revoked, cancelled, applied.info)

    async def _cool_place(self, place: DesktopKey, cooldowns: dict[str, Cooldown]) -> None:
        now, idle_s = self._clock(), self.idle_s

        def change(record: DesktopControl) -> tuple[DesktopControl, None]:
            return cool_down(sweep(record, now, idle_s)[0], cooldowns), None

        await self.store.change(place, change)

    def agent_acted(self, key: DesktopKey, data: dict[str, Any]) -> None:
        """An admitted agent action happened: its viewers mark it (never waits)."""
        self.publisher.action(
            key,
            {
                "relay_id": key.relay_id,
                "desktop_session_id": key.desktop_session_id,
                "at": self._clock(),
                **data,
            },
        )

    # -- reading -----------------------------------------------------------------------------

    async def state(self, key: DesktopKey) -> ControlInfo:
        """Who is in control of ``key`` now."""
        (record,) = await self.store.read_many([key])
        return view(self._with_pending(key, record), self._clock(), self.idle_s)

    async def annotate(self, rows: Sequence[DesktopRow]) -> list[DesktopRow]:
        """``rows`` with their control state (``DesktopRow.control``)."""
        keys = [DesktopKey(row.relay_id, row.desktop_session_id) for row in rows]
        try:
            records = await self.store.read_many(keys)
        except OpError as err:
            log.warning("rows without their control state: %s", err.message)
            return list(rows)
        now, idle_s, pending = self._clock(), self.idle_s, self._pending
        annotated = []
        for row, key, record in zip(rows, keys, records, strict=True):
            if record.is_empty() and key not in pending:
                info = IDLE  # most desktops, most of the time: shared, never changed
            else:
                info = view(self._with_pending(key, record), now, idle_s)
            annotated.append(row.with_control(info))
        return annotated

    def _with_pending(self, key: DesktopKey, record: DesktopControl) -> DesktopControl:
        pending = self._pending.get(key)
        if pending is None:
            return record
        return note_person(
            record, pending.name, pending.user_id, pending.at, self.idle_s, named=pending.named
        )

    # -- the one way records change ----------------------------------------------------------

    async def _apply(self, key: DesktopKey, rule: Rule[T]) -> Applied[T]:
        now = self._clock()
        # A person's input stays pending until a write that carries it has landed: an agent's
        # admission racing the writer then still sees it (a store write is not instant).
        pending = self._pending.get(key)
        idle_s = self.idle_s

        def change(record: DesktopControl) -> tuple[DesktopControl, Applied[T]]:
            record, expired = sweep(record, now, idle_s)
            if pending is not None:
                record = note_person(
                    record, pending.name, pending.user_id, pending.at, idle_s, named=pending.named
                )
            record, result = rule(record, now)
            info = view(record, now, idle_s)
            changed = signature(info) != record.shown
            if changed:
                record = replace(record, shown=signature(info))
            return record, Applied(result, expired, info, changed, next_change(record, now, idle_s))

        applied = await self.store.change(key, change)
        if pending is not None and self._pending.get(key) is pending:
            del self._pending[key]
        await self._after(key, applied)
        return applied

    async def _after(self, key: DesktopKey, applied: Applied[Any]) -> None:
        for grant in applied.expired:
            reason = grant.expiry(self._clock()) or "idle"
            await self._audit.record("expired", key, grant.agent_name, grant_details(grant), reason)
        if applied.changed:
            self.publisher.state(key, applied.info)
            for listener in self.state_listeners:
                listener(key, applied.info)
        if applied.info["state"] != "person":
            self._released.discard(key)
        elif key not in self._released:
            self._released.add(key)  # a person holds it now: nothing the agent held stays held
            self._release_held(key)
        if applied.next_at is not None:
            self._wake_at(key, applied.next_at)

    def _wake_at(self, key: DesktopKey, at: float) -> None:
        current = self._timers.get(key)
        if current is not None and current[0] <= at:
            return
        if current is not None:
            current[1].cancel()
        self._timers[key] = (at, asyncio.create_task(self._wake(key, at)))

    async def _wake(self, key: DesktopKey, at: float) -> None:
        await asyncio.sleep(max(0.0, at - self._clock()) + 0.01)
        self._timers.pop(key, None)
        try:
            await self._apply(key, _same)
        except OpError as err:
            log.warning("control state of a desktop not refreshed: %s", err.message)

    # -- desktops that end, relays' reports, Stop from other replicas -------------------------

    async def row_changed(self, row: DesktopRow) -> None:
        """Inventory listener: a desktop that ended leaves no control state behind."""
        if row.state not in ENDED_STATES:
            return
        key = DesktopKey(row.relay_id, row.desktop_session_id)
        self._pending.pop(key, None)
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer[1].cancel()
        with contextlib.suppress(OpError):
            await self.store.forget(key)
        with contextlib.suppress(OpError):
            await self._bus.forget(desktop_topic(key))

    async def relay_connected(self, relay_id: RelayId, hello: Hello) -> None:
        return None

    async def relay_disconnected(self, relay_id: RelayId) -> None:
        return None

    async def relay_event(self, relay_id: RelayId, event: Event) -> None:
        """``desktop.person_input``: someone used the relay host's real screen."""
        session_id = event.data.get("desktop_session_id")
        if event.name != PERSON_INPUT_EVENT or not isinstance(session_id, str):
            return
        # A relay's claim reaches only its own desktops, and only one the inventory knows runs.
        row = await self._directory.row(relay_id, session_id) if self._directory else None
        if row is None or row.state != "running":
            return
        self.person_input(DesktopKey(relay_id, session_id), SCREEN_PERSON, None, named=False)

    async def _listen_stops(self) -> None:
        """Stop pressed on any replica ends this replica's requests of the agents named."""
        while True:
            try:
                async for data in self.store.stops():
                    self._stop_here(data)
            except OpError as err:
                log.warning("cannot follow Stop from other replicas (%s); retrying", err.message)
            await asyncio.sleep(RETRY_S)

    def _stop_here(self, data: dict[str, Any]) -> None:
        key = DesktopKey(str(data.get("relay_id")), str(data.get("desktop_session_id")))
        by = str(data.get("by") or "a person")
        for agent in data.get("agents") or [None]:
            self.inflight.cancel(key, by, agent if isinstance(agent, str) else None)
