"""``WarmPool``: ready desktops per profile that a matching start takes instead of starting one.

A pooled desktop is an ordinary desktop of processes started ahead of time under a slot name
no start can use (``pool.<profile>.<n>``). Until a start takes it, it is recorded only as a
start in progress (``Slots.starting``): no row, no status, no viewer, no screen action and no
X authority entry names it, and a relay killed meanwhile leaves it to the next one, which
stops it like any start that did not finish. Taken, it gets the start's slot, starter and
start time and becomes a desktop like any other; stopped, it is gone (nothing is reused). The
pool refills in the background, ``concurrency`` starts at a time (docs/desktops.md,
"Warm pool").

While it waits, a ready desktop is frozen as a pause freezes one (no CPU at all), with the
relay's viewer held on its x11vnc (relay/desktops/wake.py); a take thaws it, and its first
viewer is served at once. A relay whose desktops have no cgroup keeps them running.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import secrets
from collections.abc import Awaitable, Mapping
from typing import TYPE_CHECKING, Final

from relay.desktops.launcher import StartOptions
from relay.desktops.process import run_to_completion
from relay.desktops.profiles import Profile
from relay.desktops.slots import now_iso
from relay.desktops.state import Desktop
from relay.desktops.validation import StartRequest
from wire.errors import OpError
from wire.ids import DesktopSessionId
from wire.ops import PoolReport

if TYPE_CHECKING:
    from relay.desktops.processes import ProcessDesktops

logger = logging.getLogger(__name__)

SETTING: Final = "RELAYDESK_POOL"
# More ready desktops of one profile than any host here runs at once is a typo, not a plan.
MAX_PER_PROFILE: Final = 32
# A pooled start that failed is tried again after this long (no hot loop on a broken host).
RETRY_S: Final = 30.0
SLOT_PREFIX: Final = "pool."


def parse_pool(raw: str, profiles: Mapping[str, Profile]) -> dict[str, int]:
    """``RELAYDESK_POOL`` (``standard=2,minimal=1``; empty or ``0``: no pool) as profile →
    size; raises ``ValueError`` saying what is wrong (the relay refuses to start)."""
    raw = raw.strip()
    if raw in ("", "0"):
        return {}
    sizes: dict[str, int] = {}
    for item in (part.strip() for part in raw.split(",")):
        name, sep, count = (word.strip() for word in item.partition("="))
        if not sep or not name:
            raise ValueError(f"{item!r} is not PROFILE=COUNT (e.g. standard=2,minimal=1)")
        if name not in profiles:
            known = ", ".join(sorted(profiles))
            raise ValueError(f"unknown profile {name!r}; this relay has {known}")
        if name in sizes:
            raise ValueError(f"profile {name!r} is named twice")
        if not count.isdigit() or int(count) > MAX_PER_PROFILE:
            raise ValueError(f"{name}={count!r}: the count must be a whole number 0..32")
        if missing := profiles[name].missing():
            raise ValueError(f"profile {name!r} is unavailable here: missing {', '.join(missing)}")
        sizes[name] = int(count)
    return {name: size for name, size in sizes.items() if size}


class WarmPool:
    """Ready desktops of the lifecycle ``desktops`` (its lock guards every change)."""

    def __init__(
        self,
        desktops: ProcessDesktops,
        sizes: Mapping[str, int],
        *,
        concurrency: int = 1,
        geometry: str = StartOptions.geometry,
    ) -> None:
        self._desktops = desktops
        self._launcher = desktops.launcher
        self.sizes = dict(sizes)
        self.geometry = geometry
        # The start each profile's pooled desktops are made by (and a take must match).
        self._shapes = {
            name: self._launcher.request(StartOptions(geometry=geometry, profile=name))
            for name in self.sizes
        }
        self._ready: dict[str, list[Desktop]] = {name: [] for name in self.sizes}
        self._filling: dict[str, set[int]] = {name: set() for name in self.sizes}
        # Ready desktops frozen while they wait (by session).
        self._frozen: set[str] = set()
        self._freezes = True  # False once the host said it cannot freeze (said once)
        self._gate = asyncio.Semaphore(concurrency)
        self._tasks: set[asyncio.Task[None]] = set()
        self._after: Awaitable[None] | None = None
        self._open = False
        self.hits = 0
        self.misses = 0

    # -- the lifecycle's part ---------------------------------------------------------------

    def start(self, after: Awaitable[None] | None = None) -> None:
        """Begin filling, once ``after`` (the adoption's clean-up) is done."""
        self._after, self._open = after, True
        self.refill()

    async def take(self, req: StartRequest) -> Desktop | None:
        """A ready desktop for ``req`` given its slot, thawed, or None: ``req`` does not match
        the pool's start, or the pool is empty (a miss). The caller holds the lifecycle lock."""
        profile = self._matching(req)
        if profile is None:
            return None
        desktop = self._pop_live(profile)
        if desktop is not None and not await self._thawed(desktop):
            self._dropping(desktop)
            desktop = None
        if desktop is None:
            self.misses += 1
            logger.info("pool of %s empty: a cold start for slot=%s", profile, req.slot)
        else:
            self.hits += 1
            self._desktops.slots.starting.pop(desktop.desktop_session_id, None)
            desktop.slot, desktop.started_by = req.slot, req.started_by
            desktop.started_at = now_iso()
            logger.info("desktop of the %s pool taken for slot=%s", profile, req.slot)
        self.refill()
        return desktop

    def report(self) -> PoolReport:
        return {
            "geometry": self.geometry,
            "profiles": [
                {
                    "profile": name,
                    "size": size,
                    "ready": len(self._ready[name]),
                    "starting": len(self._filling[name]),
                }
                for name, size in sorted(self.sizes.items())
            ],
            "hits": self.hits,
            "misses": self.misses,
        }

    async def close(self, stop: bool) -> None:
        """Stop filling; ``stop``: stop every ready desktop (none was ever shown to anyone),
        else leave them recorded for the next relay, which stops them with its adoption."""
        self._open = False
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        async with self._desktops.slots.lock:
            for ready in self._ready.values():
                while ready:
                    desktop = ready.pop()
                    if stop:
                        await self._discard(desktop)
            await self._desktops.slots.save()

    # -- filling ------------------------------------------------------------------------------

    def refill(self) -> None:
        """Start what each profile lacks, in the background."""
        if not self._open:
            return
        for name, size in self.sizes.items():
            for _ in range(size - len(self._ready[name]) - len(self._filling[name])):
                index = min(set(range(size + 1)) - self._filling[name] - self._indexes(name))
                self._filling[name].add(index)
                task = asyncio.create_task(self._fill(name, index), name=f"pool-{name}")
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _fill(self, profile: str, index: int) -> None:
        session_id = DesktopSessionId(secrets.token_hex(16))
        try:
            if self._after is not None:
                await asyncio.shield(self._after)
            async with self._gate:
                desktop = await self._launch(profile, index, session_id)
        except BaseException as err:
            # The launch stopped what it had spawned; its record of a start goes too, or the
            # next relay would take the start for one still in progress.
            self._desktops.slots.starting.pop(session_id, None)
            await asyncio.shield(self._desktops.slots.save())
            if not isinstance(err, Exception):  # cancelled: the pool is closing
                raise
            logger.exception("a pooled %s desktop did not start; trying again later", profile)
            self._filling[profile].discard(index)
            await asyncio.sleep(RETRY_S)
            self.refill()
            return
        self._filling[profile].discard(index)
        async with self._desktops.slots.lock:  # a take never sees it half frozen
            if not self._open:  # closed while it started: it never joins the pool
                await self._discard(desktop)
                return
            try:
                await self._rest(desktop)
            except BaseException:  # cancelled: the pool is closing
                await asyncio.shield(self._discard(desktop))
                raise
            self._ready[profile].append(desktop)
        logger.info(
            "pooled %s desktop ready (%d of %d)",
            profile,
            len(self._ready[profile]),
            self.sizes[profile],
        )

    async def _launch(self, profile: str, index: int, session_id: DesktopSessionId) -> Desktop:
        """One pooled desktop; its start stays recorded as a start in progress (the relay's
        state file names it, and no sweep of the desktop user ends it) until it is taken."""
        shape = dataclasses.replace(self._shapes[profile], slot=f"{SLOT_PREFIX}{profile}.{index}")
        return await self._launcher.launch(shape, session_id)

    # -- internals ----------------------------------------------------------------------------

    def _matching(self, req: StartRequest) -> str | None:
        """The profile whose pooled start ``req`` asks for, slot and starter aside."""
        shape = self._shapes.get(req.profile or "")
        if shape is None or req.persist_home:
            return None
        same = dataclasses.replace(req, slot=shape.slot, started_by=shape.started_by) == shape
        return req.profile if same else None

    def _pop_live(self, profile: str) -> Desktop | None:
        """The oldest ready desktop whose processes all run (a dead one is dropped)."""
        ready = self._ready[profile]
        while ready:
            desktop = ready.pop(0)
            if self._launcher.dead(desktop) is None:
                return desktop
            logger.warning("a pooled %s desktop died while it waited; dropped", profile)
            self._dropping(desktop)
        return None

    def _dropping(self, desktop: Desktop) -> None:
        task = asyncio.create_task(self._drop(desktop), name="pool-drop")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _drop(self, desktop: Desktop) -> None:
        async with self._desktops.slots.lock:
            await self._discard(desktop)

    async def _discard(self, desktop: Desktop) -> None:
        """Stop a pooled desktop that is not taken (caller holds the lock)."""
        await self._thawed(desktop)  # a frozen process cannot act on the stop's SIGTERM
        # Forgotten first: the last desktop's removal ends whatever its user left running.
        self._desktops.slots.starting.pop(desktop.desktop_session_id, None)
        await run_to_completion(self._launcher.remove(desktop))

    async def _rest(self, desktop: Desktop) -> None:
        """Freeze a ready desktop until it is taken (kept running where that cannot be)."""
        if not self._freezes:
            return
        self._frozen.add(desktop.desktop_session_id)  # before: a cancelled freeze may be done
        try:
            await self._launcher.freeze(desktop, True)
        except OpError as err:
            self._frozen.discard(desktop.desktop_session_id)
            self._freezes = False
            logger.info("pooled desktops wait running: %s", err.message)

    async def _thawed(self, desktop: Desktop) -> bool:
        """Thaw a ready desktop the pool froze; False: it could not be (it is dropped)."""
        if desktop.desktop_session_id not in self._frozen:
            return True
        self._frozen.discard(desktop.desktop_session_id)
        try:
            await self._launcher.freeze(desktop, False)
        except OpError as err:
            logger.warning("a pooled desktop could not be thawed; dropped: %s", err.message)
            return False
        return True

    def _indexes(self, profile: str) -> set[int]:
        prefix = f"{SLOT_PREFIX}{profile}."
        return {int(d.slot.removeprefix(prefix)) for d in self._ready[profile]}
