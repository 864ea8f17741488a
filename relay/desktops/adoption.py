"""Re-adoption at start-up: the desktops an earlier relay recorded are kept when they are still
its own and pass the probe; interrupted starts and everything else are stopped and cleaned up
(docs/desktops.md, "Re-adoption")."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from relay.desktops.homes import Homes, remove_dirs, remove_stale_runtime_dirs
from relay.desktops.probe import ProbeResult
from relay.desktops.slots import Slots
from relay.desktops.starter import beat
from relay.desktops.state import Desktop, StartingDesktop

logger = logging.getLogger(__name__)

Health = Callable[[Desktop], Awaitable[ProbeResult]]


async def adopt_from_state(slots: Slots, homes: Homes, health: Health) -> list[Desktop]:
    """Re-adopt recorded desktops that pass ``health``; stop the rest (takes the lock)."""
    records = await asyncio.to_thread(slots.state.load)
    interrupted = await asyncio.to_thread(slots.state.load_starting)
    adopted: list[Desktop] = []
    async with slots.lock:
        await asyncio.to_thread(beat, slots.config)
        for record in interrupted:
            await _remove_interrupted(slots, record)
        for record in records:
            desktop = _parse_record(record)
            if desktop is not None and await _adopt_one(slots, desktop, health):
                adopted.append(desktop)
        await slots.save()
        keep = {d.desktop_session_id for d in adopted}
        await asyncio.to_thread(remove_dirs, slots.config.run_dir, keep)
        if adopted or records or interrupted:
            await homes.desktop_user()
            await asyncio.to_thread(remove_dirs, homes.root() / "sessions", keep)
        if slots.audio is not None:
            await asyncio.to_thread(remove_stale_runtime_dirs, slots.audio.runtime_root)
    return adopted


def _parse_record(record: dict[str, Any]) -> Desktop | None:
    try:
        return Desktop.from_record(record)
    except (KeyError, TypeError, ValueError) as err:
        logger.warning("skipping malformed desktop record: %s", type(err).__name__)
        return None


async def _adopt_one(slots: Slots, desktop: Desktop, health: Health) -> bool:
    clash = desktop.key in slots.desktops
    full = len(slots.desktops) >= slots.config.max_desktops
    # A desktop started without credentials is open to every local user: never kept.
    open_to_all = desktop.credentials is None
    refused = clash or full or open_to_all
    result = await health(desktop) if not refused else None
    if result is not None and result.ok:
        slots.desktops[desktop.key] = desktop
        logger.info("re-adopted desktop kind=%s slot=%s", desktop.kind, desktop.slot)
        return True
    reason = (
        "slot taken" if clash else "limit" if full
        else "no credentials" if open_to_all else (result and result.reason)
    )  # fmt: skip
    logger.info("not re-adopting desktop slot=%s: %s", desktop.slot, reason)
    await slots.stop_processes(desktop)
    return False


async def _remove_interrupted(slots: Slots, record: dict[str, Any]) -> None:
    """Stop what a start the last relay did not finish spawned (only groups still its own)."""
    try:
        starting = StartingDesktop.from_record(record)
    except (KeyError, TypeError, ValueError) as err:
        logger.warning("skipping malformed record of a start: %s", type(err).__name__)
        return
    clean = await starting.processes.stop(slots.config.stop_grace_s)
    logger.info(
        "removed an interrupted start of slot=%s (%d processes)%s", starting.slot,
        len(starting.processes.children), "" if clean else " (some processes remain)",
    )  # fmt: skip
