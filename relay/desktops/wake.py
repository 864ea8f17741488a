"""``WakeViewers``: a connection the relay holds to a paused desktop's x11vnc, so that the first
viewer after its resume is served at once (docs/desktops.md, "Pause and resume").

With no client, x11vnc looks for one every 200 ms, and its first client costs it a set-up; a
viewer opened right after a resume waited for both. So just before the freeze the relay
connects to x11vnc and authenticates with the desktop's secret (the handshake a viewer's
channel makes, without asking for the screen), holds that connection while the desktop is
paused (frozen, x11vnc spends nothing on it) and lets go :data:`HOLD_AFTER_RESUME_S` after the
thaw. Nothing depends on it: a pause whose connection fails goes on without it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Final

from relay.desktops.probe import LOOPBACK
from relay.vnc_target import VncTarget
from wire.errors import RfbHandshakeError

logger = logging.getLogger(__name__)

# How long a pause waits for x11vnc to take the connection (it may be busy or gone).
CONNECT_TIMEOUT_S: Final = 2.0
# How long after a resume x11vnc keeps its client: time for a viewer or an agent to come back
# (an idle pause counts it as a viewer: relay/desktops/idle.py).
HOLD_AFTER_RESUME_S: Final = 5.0


class WakeViewers:
    """The held connections, by desktop session."""

    def __init__(self) -> None:
        self._hold_after_resume_s = HOLD_AFTER_RESUME_S
        self._held: dict[str, VncTarget] = {}
        self._letting_go: dict[str, asyncio.Task[None]] = {}

    def holds(self, desktop_session_id: str) -> bool:
        """Whether a live connection to the desktop's x11vnc is held."""
        target = self._held.get(desktop_session_id)
        return target is not None and not target.hung_up

    async def hold(self, desktop_session_id: str, port: int, secret: bytes | None) -> None:
        """Connect to the x11vnc at ``port`` (the desktop is about to be frozen); a connection
        still held from a recent resume is kept."""
        timer = self._letting_go.pop(desktop_session_id, None)
        if timer is not None:
            timer.cancel()
        if self.holds(desktop_session_id) or secret is None:
            return
        await self.let_go(desktop_session_id)  # one that x11vnc closed
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                target = await VncTarget.open(LOOPBACK, port, secret)
        except (OSError, RfbHandshakeError, TimeoutError) as err:
            logger.info("paused without a held viewer (its resume is slower): %s", err)
            return
        self._held[desktop_session_id] = target

    def let_go_later(self, desktop_session_id: str) -> None:
        """The desktop was thawed: close its connection after a while."""
        if desktop_session_id in self._held and desktop_session_id not in self._letting_go:
            self._letting_go[desktop_session_id] = asyncio.create_task(
                self._let_go_after(desktop_session_id), name="wake-viewer"
            )

    async def let_go(self, desktop_session_id: str) -> None:
        """Close the desktop's connection now (it ends, or the pause failed)."""
        timer = self._letting_go.pop(desktop_session_id, None)
        if timer is not None:
            timer.cancel()
        await self._close(desktop_session_id)

    async def close(self) -> None:
        for desktop_session_id in [*self._held, *self._letting_go]:
            await self.let_go(desktop_session_id)

    async def _let_go_after(self, desktop_session_id: str) -> None:
        await asyncio.sleep(self._hold_after_resume_s)
        self._letting_go.pop(desktop_session_id, None)  # this task: never cancelled by itself
        await self._close(desktop_session_id)

    async def _close(self, desktop_session_id: str) -> None:
        target = self._held.pop(desktop_session_id, None)
        if target is not None:
            await target.aclose()
