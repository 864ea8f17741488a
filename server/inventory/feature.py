"""Wiring of the inventory feature into the app: inventory, actions, events, history pruning.

``server.app`` calls :func:`routes` and enters :func:`lifespan`, which yields the parts built
here (:class:`InventoryParts`: ``bus``, ``inventory``, ``events``, ``actions``).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final

from starlette.routing import BaseRoute

from server.actions.a11y import A11Y_ACTIONS
from server.actions.desktop import DESKTOP_ACTIONS
from server.actions.desktop_apps import DESKTOP_APP_ACTIONS
from server.actions.desktop_tools import DESKTOP_TOOL_ACTIONS
from server.actions.registry import ActionRegistry
from server.actions.routes import action_routes
from server.config import Settings
from server.control.actions import CONTROL_ACTIONS
from server.control.model import DesktopKey
from server.control.policy import PolicyBook
from server.control.routes import control_routes
from server.control.service import ControlService
from server.control.store import create_control_store
from server.db.base import utc_now
from server.db.store import Store
from server.events.bus import Bus, create_bus
from server.events.hub import ConversationEvents
from server.events.routes import event_routes
from server.inventory.service import Inventory
from server.relays.calls import call
from server.relays.router import RelayRouter
from wire import ops
from wire.errors import OpError
from wire.ids import RelayId

log = logging.getLogger(__name__)

PRUNE_INTERVAL_S: Final = 3600.0


def routes() -> list[BaseRoute]:
    return [*action_routes, *event_routes, *control_routes]


async def _prune_forever(inventory: Inventory, store: Any, settings: Settings) -> None:
    """Hourly: stopped desktops past the history retention, audit rows past theirs."""
    while True:
        try:
            now = utc_now()
            history = await inventory.prune_history(
                now - timedelta(days=settings.history_retention_days)
            )
            audit = await store.prune_audit(now - timedelta(days=settings.audit_retention_days))
            if history or audit:
                log.info("pruned %d desktop history rows and %d audit rows", history, audit)
        except Exception:
            log.exception("pruning history failed")
        await asyncio.sleep(PRUNE_INTERVAL_S)


@dataclass(frozen=True)
class InventoryParts:
    """What the inventory feature builds: the bus, the inventory, its events, the actions,
    and who is in control of each desktop."""

    bus: Bus
    inventory: Inventory
    events: ConversationEvents
    actions: ActionRegistry
    control: ControlService


def build_control(
    settings: Settings,
    store: Store,
    bus: Bus,
    inventory: Inventory,
    events: ConversationEvents,
    hub: RelayRouter | None = None,
) -> ControlService:
    """The control service, its store chosen by ``RELAYDESK_REDIS_URL``, fed by the inventory
    (rows that end) and the relays (a person at a host's real screen)."""
    control = ControlService(
        create_control_store(settings.redis_url), PolicyBook.from_settings(settings), bus, store,
        store, directory=inventory,
    )  # fmt: skip
    inventory.add_listener(control.row_changed)
    if hub is not None:
        control.use_releaser(functools.partial(release_held, hub, settings.request_timeout_s))
    inventory.use_control(control.annotate)
    events.use_control(control.annotate)
    return control


async def release_held(hub: RelayRouter, timeout_s: float, key: DesktopKey) -> None:
    """Ask the desktop's relay to let go of what an agent held there (best effort: a relay
    that is away has released it with its display's connection anyway)."""
    args = ops.SessionArgs(desktop_session_id=key.desktop_session_id)
    try:
        await call(hub, RelayId(key.relay_id), ops.INPUT_RELEASE, args, timeout_s)
    except OpError as err:
        log.info("held input on %s not released: %s", key.desktop_session_id, err.message)


@contextlib.asynccontextmanager
async def lifespan(
    store: Store, hub: RelayRouter, settings: Settings
) -> AsyncIterator[InventoryParts]:
    """Build the feature's parts; stop the pruner and close the bus on exit."""
    bus = create_bus(settings.redis_url)
    inventory = Inventory(
        store,
        hub,
        probe_timeout_s=settings.request_timeout_s,
        max_rows=settings.max_desktops_per_relay,
    )
    events = ConversationEvents(bus, store)
    inventory.add_batch_listener(events.inventory_changed)
    if not settings.redis_url:
        # One replica: no relay is connected yet, so nothing confirms last run's rows.
        await inventory.forget_connections(r.relay_id for r in await store.list_relays())
    hub.add_observer(inventory)
    control = build_control(settings, store, bus, inventory, events, hub)
    hub.add_observer(control)
    await control.start(replicas=settings.clustered)
    pruner = asyncio.create_task(_prune_forever(inventory, store, settings), name="inventory-prune")
    try:
        registry = ActionRegistry(
            DESKTOP_ACTIONS
            + DESKTOP_APP_ACTIONS
            + A11Y_ACTIONS
            + CONTROL_ACTIONS
            + DESKTOP_TOOL_ACTIONS
        )
        yield InventoryParts(bus, inventory, events, registry, control)
    finally:
        pruner.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await pruner
        await control.aclose()
        await events.aclose()
        await bus.close()
