"""``IdlePause``: pause a running desktop nobody uses (``RELAYDESK_IDLE_PAUSE_S``).

A desktop is idle when, for the whole window, no viewer was connected to it (a channel
through the relay, or a connection to its x11vnc: the server's direct path), no op acted on
it (``relay/activity.py``) and it was not recorded. An idle desktop is paused exactly as
``desktop.pause`` pauses it (``Desktops.pause``: the same freeze, state file and event); it
stays paused until a ``desktop.resume`` (docs/desktops.md, "Idle pause").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

from relay.activity import Activity
from relay.desktops.lifecycle import Desktops
from wire.errors import ErrorCode, OpError

logger = logging.getLogger(__name__)

# Where the kernel lists TCP sockets (the relay's network namespace, where x11vnc listens).
PROC_TCP: Final = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))
TCP_ESTABLISHED: Final = "01"
# How often desktops are looked at: a quarter of the window, within these bounds.
CHECK_MIN_S: Final = 0.25
CHECK_MAX_S: Final = 10.0

Watched = Callable[[str], bool]
Lifecycle = Desktops[Any, Any, Any]


def connected_ports(tables: Sequence[Path] = PROC_TCP) -> set[int]:
    """Local ports of the established TCP connections (the server's end of each)."""
    ports: set[int] = set()
    for table in tables:
        try:
            lines = table.read_text(encoding="ascii").splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 3 and fields[3] == TCP_ESTABLISHED:
                ports.add(int(fields[1].rpartition(":")[2], 16))
    return ports


class IdlePause:
    """Pauses the idle desktops of ``lifecycles`` (``Desktops``) after ``after_s`` seconds."""

    def __init__(
        self,
        after_s: float,
        lifecycles: Sequence[Lifecycle],
        activity: Activity,
        *,
        watched: Watched,
        recorded: Watched,
    ) -> None:
        self.after_s = after_s
        self._lifecycles = lifecycles
        self._activity = activity
        self._watched = watched
        self._recorded = recorded
        self._interval = min(max(after_s / 4, CHECK_MIN_S), CHECK_MAX_S)
        self._refused: set[str] = set()  # desktops that cannot be paused (said once)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None and self.after_s > 0:
            self._task = asyncio.create_task(self._run(), name="idle-pause")
            logger.info("desktops idle for %g s are paused", self.after_s)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            try:
                await self.check()
            except Exception:
                logger.exception("idle pause round failed")

    async def check(self) -> None:
        """One round: note who uses each running desktop, pause those idle long enough."""
        ports = await asyncio.to_thread(connected_ports)
        live: list[str] = []
        for lifecycle in self._lifecycles:
            for desktop in lifecycle.slots.sorted():
                session_id = desktop.desktop_session_id
                live.append(session_id)
                if session_id in self._refused:
                    continue
                if (
                    desktop.state != "running"  # paused: the window starts again on resume
                    or desktop.to_row().get("vnc_port") in ports
                    or self._watched(session_id)
                    or self._recorded(session_id)
                ):
                    self._activity.touch(session_id)
                elif self._activity.idle_s(session_id) >= self.after_s:
                    await self._pause(lifecycle, desktop.slot, session_id)
        self._activity.keep_only(live)
        self._refused &= set(live)

    async def _pause(self, lifecycle: Lifecycle, slot: str, session_id: str) -> None:
        why = f"idle for {self.after_s:g} s: no viewer, no action, not recorded"
        try:
            await lifecycle.pause(slot=slot, desktop_session_id=session_id, why=why)
        except OpError as err:
            if err.code != ErrorCode.UNAVAILABLE:
                return  # stopped, reset or paused meanwhile
            self._refused.add(session_id)
            logger.warning("idle desktop slot=%s not paused: %s", slot, err.message)
