"""Expired web sessions and spent login links are deleted on a schedule.

An expired session is already refused on lookup; purging keeps the table from growing
without bound and removes hashes nothing will ever match again. ``relaydesk admin
purge-sessions`` does the same by hand.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Protocol

from server.tasks import cancel_and_wait

log = logging.getLogger(__name__)


class SessionPurger(Protocol):
    async def purge_expired_sessions(self) -> int: ...


async def purge_once(store: SessionPurger) -> int:
    """One purge; a failure is logged and counts as nothing purged (the next run retries)."""
    try:
        purged = await store.purge_expired_sessions()
    except Exception:
        log.exception("purging expired sessions failed")
        return 0
    if purged:
        log.info("purged %d expired web sessions and login links", purged)
    return purged


async def purge_forever(store: SessionPurger, interval_s: float) -> None:
    """Purge now, then every ``interval_s`` seconds until cancelled."""
    while True:
        await purge_once(store)
        await asyncio.sleep(interval_s)


@contextlib.asynccontextmanager
async def session_purging(store: SessionPurger, interval_s: float) -> AsyncIterator[None]:
    """Run ``purge_forever`` for the life of the block (the app's lifespan)."""
    task = asyncio.create_task(purge_forever(store, interval_s), name="session-purge")
    try:
        yield
    finally:
        await cancel_and_wait(task)
