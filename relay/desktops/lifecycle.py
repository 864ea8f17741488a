"""``Desktops``: the relay's desktops of one kind, one per slot, whatever launches them.

Start, status, the watchdog's teardown, compare-and-stop, adoption and close run under one
lock, so a session-id comparison and the stop it guards are atomic against a racing restart of
the slot; events are sent after the lock is released (docs/desktops.md, "Lifecycle lock and
compare-and-stop"). How a desktop starts, is checked and is removed is its kind's launcher's
(``relay/desktops/launcher.py``): processes on the relay's host (``processes.py``), containers
(``docker/launcher.py``).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Generic, Protocol, TypeVar

from relay.desktops.audio import REASON_FAILED
from relay.desktops.config import DesktopSettings
from relay.desktops.credentials import RelayAuthority
from relay.desktops.launcher import Launcher, StartOptions
from relay.desktops.probe import ProbeResult
from relay.desktops.process import run_to_completion
from relay.desktops.slots import D, LiveDesktop, S, Slots, failed_event, now_iso
from relay.desktops.state import StateFile
from relay.desktops.user import DesktopUser
from relay.desktops.validation import StartRequest, check_session_id, check_slot
from relay.desktops.watchdog import ProbeStrikes, Watchdog
from wire.errors import ErrorCode, OpError, SessionConflict
from wire.ids import DesktopSessionId
from wire.ops import DesktopStartResult, DesktopStopResult, RelayRow

logger = logging.getLogger(__name__)

OnChange = Callable[[RelayRow], Awaitable[None]]
# Told a desktop's session id once it is forgotten, before its processes are ended.
OnLeaving = Callable[[DesktopSessionId], Awaitable[None]]
L = TypeVar("L", bound="Launcher[Any, Any]")
D_co = TypeVar("D_co", bound=LiveDesktop, covariant=True)


class Pool(Protocol[D_co]):
    """Ready desktops a matching start takes (``relay/desktops/pool.py``)."""

    def start(self, after: Awaitable[None] | None = None) -> None: ...

    async def take(self, req: StartRequest) -> D_co | None: ...

    async def close(self, stop: bool) -> None: ...


class Desktops(Generic[D, S, L]):
    """Starts, watches, stops and re-adopts the relay's desktops of one kind; ``launcher``
    (``L``, a :class:`Launcher` of ``D`` and ``S``) starts and ends them."""

    def __init__(
        self,
        launcher: L,
        on_change: OnChange | None = None,
    ) -> None:
        self.launcher = launcher
        self.on_change = on_change
        # Closes the desktop's viewer channels first, so viewers show it stopped at once.
        self.on_leaving: OnLeaving | None = None
        config = launcher.config
        self.max_desktops = config.max_desktops
        self.slots: Slots[D, S] = Slots(
            StateFile(launcher.state_file),
            launcher.authority,
            launcher.authority_source,
            read=not launcher.adopt_first,
            saving=launcher.saving,
        )
        launcher.attach(self.slots)
        self._lock = self.slots.lock
        self._desktops = self.slots.desktops
        self._watchdog = Watchdog(self.check_all, config.watchdog_interval_s)
        self._strikes = ProbeStrikes(config.probe_failures)
        self._cleanup: asyncio.Task[None] | None = None  # adopt(clean_up_later=True)
        # Ready desktops a matching start takes (set before ``start_pool``; None: no pool).
        self.pool: Pool[D] | None = None
        # Resets whose old desktop is still ending (replace); close() waits for them.
        self._finishing: set[asyncio.Task[None]] = set()

    @property
    def config(self) -> DesktopSettings:
        """The relay's desktop settings (shared by every kind)."""
        return self.launcher.config

    @property
    def authority(self) -> RelayAuthority:
        """The relay's X authority file (each kind writes its own entries in it)."""
        return self.launcher.authority

    # -- public operations --------------------------------------------------------------

    async def start(
        self,
        *,
        kind: str | None = None,
        slot: str = "main",
        geometry: str = "1280x800",
        depth: int = 24,
        audio: bool | None = None,
        started_by: str | None = None,
        apps: list[str] | None = None,
        profile: str | None = None,
        persist_home: bool = False,
    ) -> DesktopStartResult:
        """Start a desktop in the slot, or return the one already running there."""
        req = self.launcher.request(
            StartOptions(
                kind, slot, geometry, depth, audio, started_by, apps, profile, persist_home
            )
        )
        events: list[RelayRow] = []
        try:
            async with self._lock:
                running = await self._running_in(req.slot, events)
                if running is not None:
                    return {**running.to_row(), "already_running": True, "from_pool": False}
                await self._check_can_start(req)
                desktop = await self._take_pooled(req)
                from_pool = desktop is not None
                if desktop is None:
                    desktop = await self._launch(req)
                return {**desktop.to_row(), "already_running": False, "from_pool": from_pool}
        finally:
            await self._emit(events)

    async def start_many(self, reqs: Sequence[StartRequest]) -> list[D | BaseException]:
        """Start one desktop per request, all at once under the lock (the forks of a
        snapshot); each result is the desktop or why its start failed."""
        events: list[RelayRow] = []
        try:
            async with self._lock:
                await self._check_room(reqs, events)
                await self._check_can_start(reqs[0])
                for req in reqs[1:]:
                    await self.launcher.ready(req)
                launches = [asyncio.ensure_future(self._launch(r)) for r in reqs]
                return list(await asyncio.gather(*launches, return_exceptions=True))
        finally:
            await self._emit(events)

    async def replace(self, req: StartRequest, replacing: str) -> tuple[D, bool]:
        """A reset in place: ``req``'s slot holds the session ``replacing`` now (a newer
        session there is a ``session_conflict``); a new desktop takes the slot — a ready one
        of the pool when ``req`` matches it, else a start — and the old one ends meanwhile.
        Returns the new desktop and whether it came from the pool.

        The answer does not wait for the old desktop's end: that goes on under the lock, taken
        again once free (:meth:`_finish`; :meth:`close` waits for it). The new start is
        recorded before the old desktop's teardown first yields, so that teardown never takes
        it for the last desktop of the account."""
        events: list[RelayRow] = []
        try:
            async with self._lock:
                current = await self._replaceable(req.slot, replacing, events)
                # The slot is the new desktop's from now on; the old one ends meanwhile.
                self._desktops.pop(current.slot, None)
                try:
                    await self._check_can_start(req)
                except BaseException:
                    self._desktops[current.slot] = current  # nothing changes
                    raise
                events.append(
                    {
                        **current.to_row(),
                        "state": "stopped",
                        "reason": "reset",
                        "updated_at": now_iso(),
                    }
                )
                pooled = await self._take_pooled(req)
                # Started first: the new desktop is recorded as starting before its first pause.
                launch = asyncio.ensure_future(self._launch(req)) if pooled is None else None
                removal = asyncio.ensure_future(self._remove(current, "stopped"))
                try:
                    if launch is not None:
                        return await launch, False
                    assert pooled is not None
                    return pooled, True
                finally:
                    if not removal.done():
                        self._finishing.add(asyncio.create_task(self._finish(removal)))
        finally:
            await self._emit(events)

    async def _finish(self, removal: asyncio.Task[None]) -> None:
        """Hold the lock until a reset's old desktop has ended."""
        try:
            async with self._lock:
                await removal
        except Exception:
            logger.exception("ending a reset desktop failed")
        finally:
            if (task := asyncio.current_task()) is not None:
                self._finishing.discard(task)

    async def _replaceable(self, slot: str, session_id: str, events: list[RelayRow]) -> D:
        """The slot's desktop of ``session_id``, for a reset (caller holds the lock)."""
        current = await self._running_in(slot, events)
        if current is None:
            raise OpError(
                ErrorCode.NOT_RUNNING, f"no desktop runs in slot {slot!r}", {"field": "slot"}
            )
        if current.desktop_session_id != session_id:
            raise SessionConflict(current.desktop_session_id)
        return current

    async def _check_room(self, reqs: Sequence[StartRequest], events: list[RelayRow]) -> None:
        """Refuse starts into slots that hold a desktop, or more than the relay has room for
        (``count``), before anything starts (caller holds the lock)."""
        busy = [r.slot for r in reqs if await self._running_in(r.slot, events) is not None]
        if busy:
            raise OpError(
                ErrorCode.BUSY,
                f"slots: a desktop runs in {busy[0]!r} already",
                {"field": "slots", "slots": busy},
            )
        room = self.max_desktops - len(self._desktops)
        if len(reqs) > room:
            raise OpError(
                ErrorCode.LIMIT_REACHED,
                f"count: {len(reqs)} desktops asked for, this relay has room for {room} more "
                f"(at most {self.max_desktops} {self.launcher.noun})",
                {"field": "count", "max_desktops": self.max_desktops, "room": room},
            )

    async def status(self) -> list[RelayRow]:
        """Rows of the live desktops; ones whose essential processes died are failed first.

        Reads without the lifecycle lock while every desktop runs: a start of another slot
        (seconds) is not waited for, since it is no desktop until it returns. Failing a dead
        desktop takes the lock (docs/desktops.md, "Lifecycle lock and compare-and-stop")."""
        events: list[RelayRow] = []
        try:
            if any(self.launcher.dead(d) for d in self._desktops.values()):
                async with self._lock:
                    for desktop in list(self._desktops.values()):
                        await self._running_in(desktop.slot, events)
            for desktop in self.slots.sorted():
                self._note_sound_lost(desktop, events)
            return [d.to_row() for d in self.slots.sorted()]
        finally:
            await self._emit(events)

    async def running(self, desktop_session_id: str | None, slot: str) -> RelayRow | None:
        """The row of one live desktop: ``desktop_session_id``'s, or the ``slot``'s when None.
        Only its processes are checked (a dead one is failed here, as in :meth:`status`): an
        action on one desktop does not poll every other desktop's, nor wait for a start in
        another slot; one asking for the slot or session being started waits for that start."""
        events: list[RelayRow] = []
        try:
            desktop = self._lookup(desktop_session_id, slot)
            if desktop is None and not self._starting(desktop_session_id, slot):
                return None
            if desktop is None or self.launcher.dead(desktop):
                async with self._lock:
                    desktop = self._lookup(desktop_session_id, slot)
                    if desktop is None or not await self._running_in(desktop.slot, events):
                        return None
            self._note_sound_lost(desktop, events)
            return desktop.to_row()
        finally:
            await self._emit(events)

    def live(self, desktop_session_id: str) -> D | None:
        """One of this relay's desktops, looked up without the lock (a desktop being stopped
        is forgotten first, so this does not wait for its stop)."""
        return self.slots.by_session(desktop_session_id)

    def holds(self, desktop_session_id: str) -> bool:
        """Whether ``desktop_session_id`` is one of this relay's desktops (without the lock)."""
        return self.live(desktop_session_id) is not None

    def displays(self) -> set[str]:
        """The displays of the desktops this relay runs (as rows name them, ``:N``)."""
        return {f":{desktop.display}" for desktop in self._desktops.values()}

    async def stop(
        self, *, slot: str, desktop_session_id: str, kind: str | None = None
    ) -> DesktopStopResult:
        """Compare-and-stop: stop the slot only if it still holds ``desktop_session_id``."""
        if kind is not None:
            self.launcher.check_kind(kind)
        slot = check_slot(slot)
        session_id = check_session_id(desktop_session_id)
        async with self._lock:
            current = self._desktops.get(slot)
            if current is None:
                return {"stopped": False, "was_running": False}
            if current.desktop_session_id != session_id:
                logger.info(
                    "stop of %s slot %s refused: a newer session holds it", self.launcher.kind, slot
                )
                return {
                    "stopped": False,
                    "conflict": True,
                    "current_session_id": current.desktop_session_id,
                }
            await self._remove(current, "stopped")
            return {"stopped": True, "stopped_session_id": session_id}

    async def pause(
        self,
        *,
        slot: str,
        desktop_session_id: str,
        kind: str | None = None,
        why: str = "asked to",
    ) -> RelayRow:
        """Freeze every process of the slot's desktop, if it still holds ``desktop_session_id``
        (docs/desktops.md, "Pause and resume"); ``why`` goes to the log."""
        return await self._set_paused(True, slot, desktop_session_id, kind, why)

    async def resume(
        self, *, slot: str, desktop_session_id: str, kind: str | None = None
    ) -> RelayRow:
        """Thaw the slot's paused desktop, if it still holds ``desktop_session_id``."""
        return await self._set_paused(False, slot, desktop_session_id, kind)

    async def _set_paused(
        self,
        paused: bool,
        slot: str,
        desktop_session_id: str,
        kind: str | None,
        why: str = "asked to",
    ) -> RelayRow:
        if kind is not None:
            self.launcher.check_kind(kind)
        slot = check_slot(slot)
        session_id = check_session_id(desktop_session_id)
        events: list[RelayRow] = []
        try:
            async with self._lock:
                desktop = await self._pausable(slot, session_id, paused, events)
                await self.launcher.freeze(desktop, paused)
                desktop.state = "paused" if paused else "running"
                await self.slots.save()
                logger.info(
                    "%s desktop slot=%s %s: %s", self.launcher.kind, slot, desktop.state, why
                )
                row: RelayRow = {**desktop.to_row(), "updated_at": now_iso()}
                events.append(row)
                return row
        finally:
            await self._emit(events)

    async def _pausable(
        self, slot: str, session_id: DesktopSessionId, paused: bool, events: list[RelayRow]
    ) -> D:
        """The slot's desktop of ``session_id`` that a pause (``paused``) or a resume may
        change; else the refusal (caller holds the lock)."""
        desktop = await self._running_in(slot, events)
        if desktop is None:
            raise OpError(
                ErrorCode.NOT_RUNNING, f"no desktop runs in slot {slot!r}", {"field": "slot"}
            )
        if desktop.desktop_session_id != session_id:
            raise SessionConflict(desktop.desktop_session_id)
        if (desktop.state == "paused") == paused:
            code = ErrorCode.PAUSED if paused else ErrorCode.NOT_PAUSED
            state = "already paused" if paused else "not paused"
            raise OpError(code, f"this desktop is {state}", {"field": "desktop_session_id"})
        return desktop

    async def probe(self, slot: str) -> dict[str, Any]:
        """Probe one slot end to end (processes, then the kind's own chain)."""
        desktop = self._desktops.get(check_slot(slot))
        if desktop is None:
            return {
                "kind": self.launcher.kind,
                "slot": slot,
                "running": False,
                "ok": False,
                "reason": "not_running",
            }
        result = await self._health(desktop)
        return {
            "kind": self.launcher.kind,
            "slot": desktop.slot,
            "running": True,
            "desktop_session_id": desktop.desktop_session_id,
            **result.to_dict(),
        }

    async def desktop_user(self) -> DesktopUser | None:
        """Who the desktops run as (None: as the relay); leased on first use when root."""
        return await self.launcher.desktop_user()

    # -- adoption -----------------------------------------------------------------------

    async def adopt(self, *, clean_up_later: bool = False) -> list[RelayRow]:
        """Re-adopt the desktops an earlier relay recorded that are still its own and pass the
        probe; stop and remove the others and its starts that did not finish.

        ``clean_up_later``: return once the desktops are adopted and stop the rest in a task
        (holding the lifecycle lock, so no start runs before it is done): a restarted relay
        says ``hello`` without waiting for the stops (docs/desktops.md, "Relay restarts")."""
        async with self._lock:
            adoption = await self._adopt_locked()
        if adoption is None:
            return []  # nothing can be checked: the records wait for a relay that can
        adopted, leftovers = adoption
        cleaning = self._clean_up(leftovers)
        if clean_up_later:
            self._cleanup = asyncio.create_task(self._clean_up_logged(cleaning))
        else:
            await cleaning
        return [d.to_row() for d in adopted]

    async def _adopt_locked(self) -> tuple[list[D], list[DesktopSessionId]] | None:
        """Which recorded desktops are kept (their probes run together). Until the clean-up
        has stopped them, the rest stay in the state file as starts that did not finish, so
        a relay killed in between leaves them to the next one. None: the launcher cannot
        check the records now (nothing is read, written or removed)."""
        records = await self.launcher.recorded()
        if records is None:
            return None
        if not records.keep and records.desktops:
            logger.warning(
                "not re-adopting %d %s: they run as another account",
                len(records.desktops),
                self.launcher.noun,
            )
        results = await asyncio.gather(
            *(self._adoptable(d, records.keep) for d in records.desktops)
        )
        adopted: list[D] = []
        leftovers = list(records.interrupted)
        for desktop, result in zip(records.desktops, results, strict=True):
            if self._keep(desktop, result):
                adopted.append(desktop)
            else:
                leftovers.append(self.launcher.leftover(desktop))
        for leftover in leftovers:
            self.slots.starting[leftover.desktop_session_id] = leftover
        self.slots.read = True
        await self.slots.save()
        if adopted:
            logger.info("re-adopted %d %s", len(adopted), self.launcher.noun)
        return adopted, [s.desktop_session_id for s in leftovers]

    async def _adoptable(self, desktop: D, keep: bool) -> ProbeResult | None:
        """The probe of a recorded desktop that may be kept (None: it may not)."""
        if not keep or not await self.launcher.adoptable(desktop):
            return None
        if await self.launcher.frozen(desktop):
            desktop.state = "paused"  # re-adopted paused; its probe checks processes only
        return await self._health(desktop, retry=True)

    def _keep(self, desktop: D, result: ProbeResult | None) -> bool:
        """The orphan rule: a recorded desktop is kept when it is still this relay's, its slot
        is free, the relay has room for it, and it passes the probe."""
        clash = desktop.slot in self._desktops
        full = len(self._desktops) >= self.max_desktops
        if not (clash or full) and result is not None and self._passes(desktop, result):
            self._desktops[desktop.slot] = desktop
            logger.info("re-adopted %s desktop slot=%s", self.launcher.kind, desktop.slot)
            return True
        reason = (
            "slot taken"
            if clash
            else "limit"
            if full
            else "not ours"
            if result is None
            else result.reason
        )
        logger.info(
            "not re-adopting %s desktop slot=%s: %s", self.launcher.kind, desktop.slot, reason
        )
        return False

    def _passes(self, desktop: D, result: ProbeResult) -> bool:
        """The watchdog's rule at adoption too: dead processes fail at once, a chain that did
        not answer (a loaded host) is the first of its ``probe_failures`` strikes."""
        return self._strikes.verdict(desktop.desktop_session_id, result) is None

    async def _clean_up(self, leftovers: list[DesktopSessionId]) -> None:
        async with self._lock:
            await self._clean_up_locked(leftovers)

    async def _clean_up_locked(self, leftovers: list[DesktopSessionId]) -> None:
        """Stop the ``leftovers`` the adoption named, then what no desktop owns."""
        for session_id in leftovers:
            if (leftover := self.slots.starting.get(session_id)) is not None:
                clean = await run_to_completion(self.launcher.discard(leftover))
                del self.slots.starting[session_id]
                logger.info(
                    "removed what the last relay left of %s slot=%s%s",
                    self.launcher.kind,
                    leftover.slot,
                    "" if clean else " (some of it remains)",
                )
        await self.slots.save()
        # What runs now is what the lock's holders left: adopted desktops, and no start
        # (starts run under the lock), so everything else is an orphan.
        kept = {d.desktop_session_id for d in self._desktops.values()}
        await self.launcher.sweep(kept | set(self.slots.starting), bool(leftovers))

    @staticmethod
    async def _clean_up_logged(cleaning: Awaitable[None]) -> None:
        try:
            await cleaning
        except Exception:
            logger.exception("cleaning up after re-adoption failed")

    # -- watchdog and close ---------------------------------------------------------------

    def start_pool(self) -> None:
        """Begin filling the pool, if any, once the adoption's clean-up is done."""
        if self.pool is not None:
            self.pool.start(self._cleanup)

    def start_watchdog(self) -> None:
        """Begin periodic health checks (idempotent)."""
        self._watchdog.start()

    async def check_all(self) -> None:
        """One watchdog round: beat the heartbeat, probe every desktop, tear down failures (a
        dead essential process at once, a chain that does not answer after
        ``probe_failures`` rounds in a row: ``ProbeStrikes``), then the kind's own checks."""
        snapshot = list(self._desktops.values())
        await self.launcher.beat(snapshot)
        if not snapshot:
            return
        results = await asyncio.gather(*(self._health(d, retry=True) for d in snapshot))
        self._strikes.keep_only(d.desktop_session_id for d in snapshot)
        verdicts = [
            self._strikes.verdict(d.desktop_session_id, r)
            for d, r in zip(snapshot, results, strict=True)
        ]
        failed = [(d, why) for d, why in zip(snapshot, verdicts, strict=True) if why is not None]
        if failed:
            await self._fail_all(failed)
        gone = {id(desktop) for desktop, _ in failed}
        # A paused desktop's sound server and the kind's own checks would meet frozen processes.
        survivors = [d for d in snapshot if id(d) not in gone and d.state != "paused"]
        silent = await self.launcher.silent([d for d in survivors if d.audio])
        if silent:
            await self._sound_lost(silent)
        await self._note_failed_programs(survivors)
        still = [d for d in survivors if self._desktops.get(d.slot) is d]
        if reviewed := await self.launcher.review(still):
            await self._fail_all(reviewed)

    async def stop_all(self, reason: str) -> list[RelayRow]:
        """Stop every desktop and tell the server each is stopped (``reason``), while the
        connection is still open; returns the rows it sent."""
        events: list[RelayRow] = []
        async with self._lock:
            for desktop in self.slots.sorted():
                await self._remove(desktop, "stopped", save=False)
                events.append(
                    {
                        **desktop.to_row(),
                        "state": "stopped",
                        "reason": reason,
                        "updated_at": now_iso(),
                    }
                )
            if events:
                await self.slots.save()
        await self._emit(events)
        return events

    async def close(self, stop_desktops: bool, *, stop_pool: bool = True) -> None:
        """Stop the watchdog and the pool's refills; stop every desktop too when asked, else
        leave them for adoption. The pool's ready desktops (never shown to anyone) are stopped
        unless ``stop_pool`` is False: left to the next relay, which stops them."""
        if self._cleanup is not None:
            await self._cleanup
        if self.pool is not None:
            await self.pool.close(stop_desktops or stop_pool)
        await asyncio.gather(*self._finishing, return_exceptions=True)
        await self._watchdog.stop()
        async with self._lock:
            if stop_desktops:
                for desktop in self.slots.sorted():
                    await self._remove(desktop, "relay closing", save=False)
            await self.slots.save()
            left = bool(self._desktops)
            self._desktops.clear()
            await self.launcher.close(left)

    # -- internals ----------------------------------------------------------------------

    async def _check_can_start(self, req: StartRequest) -> None:
        if len(self._desktops) >= self.max_desktops:
            raise OpError(
                ErrorCode.LIMIT_REACHED,
                f"at most {self.max_desktops} {self.launcher.noun} on this relay",
                {"max_desktops": self.max_desktops},
            )
        await self.launcher.ready(req)
        if not self.slots.read and (adoption := await self._adopt_locked()) is not None:
            await self._clean_up_locked(adoption[1])

    async def _take_pooled(self, req: StartRequest) -> D | None:
        """A ready desktop of the pool for ``req``, now in its slot (None: start one)."""
        desktop = await self.pool.take(req) if self.pool is not None else None
        if desktop is not None:
            self._desktops[desktop.slot] = desktop
            await self.slots.save()
        return desktop

    async def _launch(self, req: StartRequest) -> D:
        session_id = DesktopSessionId(secrets.token_hex(16))
        try:
            desktop: D = await self.launcher.launch(req, session_id)
        except BaseException:
            self.slots.starting.pop(session_id, None)
            await asyncio.shield(self.slots.save())
            raise
        self.slots.starting.pop(session_id, None)
        self._desktops[desktop.slot] = desktop
        await self.slots.save()
        return desktop

    def _lookup(self, desktop_session_id: str | None, slot: str) -> D | None:
        if desktop_session_id is None:
            return self._desktops.get(slot)
        return self.live(desktop_session_id)

    def _starting(self, desktop_session_id: str | None, slot: str) -> bool:
        """Whether a start in progress may yet produce the desktop asked for."""
        return any(
            s.desktop_session_id == desktop_session_id
            if desktop_session_id is not None
            else s.slot == slot
            for s in self.slots.starting.values()
        )

    async def _running_in(self, slot: str, events: list[RelayRow]) -> D | None:
        """The slot's desktop if it runs; a dead one is failed here."""
        desktop = self._desktops.get(slot)
        if desktop is None:
            return None
        if reason := self.launcher.dead(desktop):
            await self._remove(desktop, reason)
            events.append(failed_event(desktop, reason))
            return None
        return desktop

    async def _health(self, desktop: D, retry: bool = False) -> ProbeResult:
        """Essential processes first (cheap), then the kind's end-to-end chain."""
        if reason := self.launcher.dead(desktop):
            return ProbeResult(ok=False, reason=reason, checks={"processes": False})
        if desktop.state == "paused":  # its frozen chain cannot answer, nor should it
            return ProbeResult(ok=True, checks={"processes": True, "paused": True})
        result = await self.launcher.health(desktop, retry)
        result.checks = {"processes": True, **result.checks}
        return result

    async def _sound_lost(self, silent: list[D]) -> None:
        """Watchdog: desktops whose sound server died keep running, without sound."""
        events: list[RelayRow] = []
        async with self._lock:
            for desktop in silent:
                if self._desktops.get(desktop.slot) is desktop and desktop.audio:
                    self._lose_sound(desktop, events)
            if events:
                await self.slots.save()
        await self._emit(events)

    async def _note_failed_programs(self, desktops: Sequence[D]) -> None:
        """Watchdog: a session program that failed (a browser that crashed at start) leaves
        the desktop running; its row's ``reason`` names it, and the server hears it at once."""
        events: list[RelayRow] = []
        async with self._lock:
            for desktop in desktops:
                failed = self.launcher.failed_programs(desktop)
                if (
                    self._desktops.get(desktop.slot) is not desktop
                    or failed == desktop.failed_programs
                ):
                    continue
                for words in failed[len(desktop.failed_programs) :]:
                    logger.warning(
                        "%s desktop slot=%s: %s", self.launcher.kind, desktop.slot, words
                    )
                desktop.failed_programs = failed
                events.append({**desktop.to_row(), "updated_at": now_iso()})
            if events:
                await self.slots.save()
        await self._emit(events)

    def _note_sound_lost(self, desktop: D, events: list[RelayRow]) -> None:
        if desktop.audio and self.launcher.sound_lost(desktop):
            self._lose_sound(desktop, events)

    def _lose_sound(self, desktop: D, events: list[RelayRow]) -> None:
        desktop.audio, desktop.audio_reason = False, REASON_FAILED
        logger.warning("%s desktop slot=%s lost its sound server", self.launcher.kind, desktop.slot)
        events.append({**desktop.to_row(), "reason": REASON_FAILED, "updated_at": now_iso()})

    async def _fail_all(self, failed: Iterable[tuple[D, str]]) -> None:
        events: list[RelayRow] = []
        async with self._lock:
            for desktop, reason in failed:
                # A stop or restart may have replaced this incarnation while it was probed.
                if self._desktops.get(desktop.slot) is desktop:
                    await self._remove(desktop, reason, save=False)
                    events.append(failed_event(desktop, reason))
            if events:
                await self.slots.save()
        await self._emit(events)

    async def _remove(self, desktop: D, reason: str, save: bool = True) -> None:
        """Forget the desktop and remove it (caller holds the lock). Once begun it runs to its
        end, even when the caller is cancelled (``run_to_completion``)."""
        await run_to_completion(self._removing(desktop, reason, save))

    async def _removing(self, desktop: D, reason: str, save: bool) -> None:
        if self._desktops.get(desktop.slot) is desktop:  # a reset's new desktop may hold it
            del self._desktops[desktop.slot]
        if desktop.state == "paused":
            await self._thaw(desktop)
        desktop.state = "stopping"
        await self._leaving(desktop.desktop_session_id)
        clean = await self.launcher.remove(desktop)
        desktop.state = "stopped" if reason == "stopped" else "failed"
        log = logger.info if reason in ("stopped", "relay closing") else logger.warning
        log(
            "%s desktop %s slot=%s: %s%s",
            self.launcher.kind,
            desktop.state,
            desktop.slot,
            reason,
            "" if clean else " (some of it remains)",
        )
        if save:
            await self.slots.save()

    async def _thaw(self, desktop: D) -> None:
        """A paused desktop being removed is thawed first, so its processes end as a running
        desktop's do (a frozen one cannot act on SIGTERM); a failed thaw leaves the kill."""
        try:
            await self.launcher.freeze(desktop, False)
        except OpError as err:
            logger.warning("paused desktop slot=%s not thawed: %s", desktop.slot, err.message)

    async def _leaving(self, desktop_session_id: DesktopSessionId) -> None:
        if self.on_leaving is None:
            return
        try:
            await self.on_leaving(desktop_session_id)
        except Exception:
            logger.exception("desktop on_leaving callback failed")

    async def _emit(self, events: list[RelayRow]) -> None:
        if self.on_change is None:
            return
        for event in events:
            try:
                await self.on_change(event)
            except Exception:
                logger.exception("desktop on_change callback failed")
