"""Control changes and agent actions on the event streams, off the input paths.

A change of who is in control goes to every conversation that sees the desktop's relay
(``desktop_control_changed``, beside ``desktop_inventory_changed``) and to the desktop's own
topic (``control``), which its viewers follow; an agent's action goes to the desktop's topic
only (``agent_action``). Publishing runs in one task: the input paths only drop a note here
and never wait for the database or the bus. Changes are coalesced per desktop (the newest
wins) and agent actions are kept in a bounded queue (the oldest go first), so a slow bus never
holds more than one state per desktop and ``ACTION_QUEUE`` actions.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from typing import Any, Final, Protocol

from server.control.model import DesktopKey
from server.db.rows import ControlInfo
from server.events.bus import EventBus
from server.events.conversations import topic_for
from server.tasks import cancel_and_wait

log = logging.getLogger(__name__)

CONTROL_CHANGED: Final = "desktop_control_changed"
CONTROL: Final = "control"
AGENT_ACTION: Final = "agent_action"
ACTION_QUEUE: Final = 256


def desktop_topic(key: DesktopKey) -> str:
    """The topic a desktop's viewers follow."""
    return f"desktop:{key.text()}"


class SharingStore(Protocol):
    """The ``Store`` read the publisher needs."""

    async def conversations_sharing(self, relay_id: str) -> list[str]: ...


def control_event(key: DesktopKey, info: ControlInfo) -> dict[str, Any]:
    return {
        "relay_id": key.relay_id,
        "desktop_session_id": key.desktop_session_id,
        "control": dict(info),
    }


class ControlPublisher:
    """Publishes control changes and agent actions in the background, in order per desktop."""

    def __init__(self, bus: EventBus, sharing: SharingStore) -> None:
        self._bus = bus
        self._sharing = sharing
        self._states: dict[DesktopKey, ControlInfo] = {}
        self._actions: deque[tuple[DesktopKey, dict[str, Any]]] = deque(maxlen=ACTION_QUEUE)
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="control-publisher")

    def state(self, key: DesktopKey, info: ControlInfo) -> None:
        """Publish that ``key`` is now under ``info``."""
        self._states[key] = info
        self._poke()

    def action(self, key: DesktopKey, data: dict[str, Any]) -> None:
        """Publish an agent's action on ``key``."""
        self._actions.append((key, data))
        self._poke()

    def _poke(self) -> None:
        self._idle.clear()
        self._wake.set()

    async def settled(self) -> None:
        """Wait until everything noted so far is published."""
        await self._idle.wait()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._states or self._actions:
                await self._publish_some()
            if not self._wake.is_set():
                self._idle.set()

    async def _publish_some(self) -> None:
        try:
            if self._states:
                key = next(iter(self._states))
                await self._publish_state(key, self._states.pop(key))
            elif self._actions:
                key, data = self._actions.popleft()
                await self._bus.publish(desktop_topic(key), AGENT_ACTION, data)
        except Exception:
            log.exception("publishing a control change failed")

    async def _publish_state(self, key: DesktopKey, info: ControlInfo) -> None:
        data = control_event(key, info)
        await self._bus.publish(desktop_topic(key), CONTROL, data)
        for conversation_id in await self._sharing.conversations_sharing(key.relay_id):
            event = {"conversation_id": conversation_id, **data}
            await self._bus.publish(topic_for(conversation_id), CONTROL_CHANGED, event)

    async def aclose(self) -> None:
        """Publish what is pending (bounded), then stop."""
        if self._task is None:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.settled(), 2.0)
        await cancel_and_wait(self._task)
