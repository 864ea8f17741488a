"""Re-adoption at start-up: the desktops an earlier relay recorded are kept when they are still
its own and pass the probe; interrupted starts and everything else are stopped and cleaned up
(docs/desktops.md, "Re-adoption").

Two steps, so that a restarted relay can say ``hello`` between them: :func:`adopt_recorded`
decides which recorded desktops are kept (their probes run together), and :func:`clean_up`
stops the rest and removes directories no desktop owns. Until the clean-up has stopped them,
the processes to stop stay in the state file as starts that did not finish, so a relay killed
in between leaves them to the next one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from relay.desktops import cgroups
from relay.desktops.homes import Homes, remove_dirs, remove_stale_runtime_dirs
from relay.desktops.probe import ProbeResult
from relay.desktops.slots import Slots
from relay.desktops.starter import beat
from relay.desktops.state import Desktop, StartingDesktop
from wire.ids import DesktopSessionId

logger = logging.getLogger(__name__)

Health = Callable[[Desktop], Awaitable[ProbeResult]]


async def adopt_recorded(
    slots: Slots, health: Health, *, keep: bool = True
) -> tuple[list[Desktop], list[DesktopSessionId]]:
    """Re-adopt the recorded desktops that pass ``health`` (takes the lock). Returns them, and
    the records :func:`clean_up` has to stop: interrupted starts and desktops not kept, held
    meanwhile in ``slots.starting``. ``keep`` False: none is kept (they run as an account this
    relay no longer holds)."""
    records = await asyncio.to_thread(slots.state.load)
    if not keep and records:
        logger.warning("not re-adopting %d desktop(s): they run as another account", len(records))
    interrupted = await asyncio.to_thread(slots.state.load_starting)
    async with slots.lock:
        await asyncio.to_thread(beat, slots.config)
        leftovers = [s for s in map(_parse_starting, interrupted) if s is not None]
        desktops = [d for d in map(_parse_record, records) if d is not None]
        results = await asyncio.gather(*(_probe(d, health) for d in desktops))
        adopted: list[Desktop] = []
        for desktop, result in zip(desktops, results, strict=True):
            if keep and _adopt_one(slots, desktop, result):
                adopted.append(desktop)
            else:
                leftovers.append(StartingDesktop.of(desktop))
        for leftover in leftovers:
            slots.starting[leftover.desktop_session_id] = leftover
        await slots.save()
    return adopted, [s.desktop_session_id for s in leftovers]


async def clean_up(slots: Slots, homes: Homes, leftovers: list[DesktopSessionId]) -> None:
    """Stop the ``leftovers`` :func:`adopt_recorded` named, then remove private, home and
    sound directories no desktop owns (takes the lock)."""
    async with slots.lock:
        for session_id in leftovers:
            if (starting := slots.starting.get(session_id)) is not None:
                await _stop(slots, starting)
                del slots.starting[session_id]
        await slots.save()
        # What runs now is what the lock's holders left: adopted desktops, and no start
        # (starts run under the lock), so every other private directory is an orphan.
        keep = {d.desktop_session_id for d in slots.desktops.values()} | set(slots.starting)
        await asyncio.to_thread(remove_dirs, slots.config.run_dir, keep)
        tmp_names = {DesktopSessionId(k[:12]) for k in keep}
        await asyncio.to_thread(remove_dirs, homes.tmp_root(), tmp_names)
        # A desktop not kept dies whole: whatever of it left its process groups too.
        if (parent := slots.cgroups()) is not None:
            await asyncio.to_thread(cgroups.kill_others, parent, set(keep))
        if leftovers or slots.desktops:
            slots.user = await homes.desktop_user()
            await asyncio.to_thread(remove_dirs, homes.root() / "sessions", keep)
            await slots.sweep_user()
        if slots.audio is not None:
            await asyncio.to_thread(remove_stale_runtime_dirs, slots.audio.runtime_root)


def _parse_record(record: dict[str, Any]) -> Desktop | None:
    try:
        return Desktop.from_record(record)
    except (KeyError, TypeError, ValueError) as err:
        logger.warning("skipping malformed desktop record: %s", type(err).__name__)
        return None


def _parse_starting(record: dict[str, Any]) -> StartingDesktop | None:
    try:
        return StartingDesktop.from_record(record)
    except (KeyError, TypeError, ValueError) as err:
        logger.warning("skipping malformed record of a start: %s", type(err).__name__)
        return None


async def _probe(desktop: Desktop, health: Health) -> ProbeResult | None:
    """``health`` of a desktop that may be kept (None: it may not, whatever it answers)."""
    if desktop.credentials is None:
        return None
    return await health(desktop)


def _adopt_one(slots: Slots, desktop: Desktop, result: ProbeResult | None) -> bool:
    clash = desktop.key in slots.desktops
    full = len(slots.desktops) >= slots.config.max_desktops
    # A desktop started without credentials is open to every local user: never kept.
    open_to_all = desktop.credentials is None
    if not (clash or full or open_to_all) and result is not None and result.ok:
        slots.desktops[desktop.key] = desktop
        logger.info("re-adopted desktop kind=%s slot=%s", desktop.kind, desktop.slot)
        return True
    reason = (
        "slot taken" if clash else "limit" if full
        else "no credentials" if open_to_all else (result and result.reason)
    )  # fmt: skip
    logger.info("not re-adopting desktop slot=%s: %s", desktop.slot, reason)
    return False


async def _stop(slots: Slots, starting: StartingDesktop) -> None:
    """Stop what a start the last relay did not finish spawned, or a desktop not kept (only
    groups still its own)."""
    clean = await slots.stop_leftover(starting)
    logger.info(
        "stopped what the last relay left of slot=%s (%d processes)%s", starting.slot,
        len(starting.processes.children), "" if clean else " (some processes remain)",
    )  # fmt: skip
