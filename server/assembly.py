"""The server's parts, built once, in floor order, by one function: :func:`assemble`.

Each part receives only the parts it uses, as constructor arguments; routes are built from
them by ``server.app``. The order is the floor plan of docs/architecture.md ("The server's
floor plan"): the database, the relays, authentication, events, the inventory, who is in
control, the actions, the screen tool, the viewer. Shutdown runs in reverse.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Final

from server.actions.a11y import A11Y_ACTIONS
from server.actions.browser import BROWSER_ACTIONS
from server.actions.context import ActionParts
from server.actions.control import CONTROL_ACTIONS
from server.actions.desktop import DESKTOP_ACTIONS
from server.actions.desktop_apps import DESKTOP_APP_ACTIONS
from server.actions.desktop_files import HOME_FILE_ACTIONS
from server.actions.desktop_fit import DESKTOP_FIT_ACTIONS
from server.actions.desktop_pool import POOL_ACTIONS
from server.actions.desktop_tools import DESKTOP_TOOL_ACTIONS
from server.actions.invoke import ActionRunner
from server.actions.recording import RECORDING_ACTIONS
from server.actions.registry import ActionRegistry
from server.actions.snapshots import SNAPSHOT_ACTIONS
from server.auth.dependencies import Authenticator
from server.auth.purge import session_purging
from server.auth.ratelimit import LoginRateLimiter
from server.auth.streams import StreamGuard, ViewerStreams, stream_guard
from server.chat.feature import build_chat
from server.chat.ports import ChatService
from server.cluster.build import login_limits, routing
from server.cluster.caches import shared_caches
from server.config import Settings, recordings_path
from server.control.model import DesktopKey
from server.control.policy import PolicyBook
from server.control.service import ControlService
from server.control.store import create_control_store
from server.db.base import utc_now
from server.db.migrate import upgrade
from server.db.rows import DesktopRow
from server.db.store import Store
from server.events.bus import EventBus, create_event_bus
from server.events.conversations import ConversationEvents
from server.inventory.service import Inventory
from server.recordings.files import RecordingFiles
from server.recordings.service import RecordingService
from server.relays.calls import call
from server.relays.hub import RelayHub
from server.relays.router import RelayRouter
from server.screen.feature import start_screen
from server.screen.tool import ScreenTool
from server.tasks import cancel_and_wait
from server.viewer.assets import NovncAssets
from server.viewer.audio import AudioService
from server.viewer.service import ViewerService
from wire import ops
from wire.errors import OpError
from wire.ids import RelayId

if TYPE_CHECKING:
    from server.cluster.router import ClusterRouter

log = logging.getLogger(__name__)

PRUNE_INTERVAL_S: Final = 3600.0
ACTIONS: Final = (
    DESKTOP_ACTIONS
    + DESKTOP_APP_ACTIONS
    + SNAPSHOT_ACTIONS
    + DESKTOP_FIT_ACTIONS
    + A11Y_ACTIONS
    + CONTROL_ACTIONS
    + DESKTOP_TOOL_ACTIONS
    + HOME_FILE_ACTIONS
    + BROWSER_ACTIONS
    + RECORDING_ACTIONS
    + POOL_ACTIONS
)


@dataclass(frozen=True)
class ServerParts:
    """Every long-lived part of one server process, in floor order.

    ``relays`` reaches any relay (this replica's links, or through the replica that holds
    it); ``links`` holds the relays connected to this replica. Routes never read this record:
    each route factory is given the parts it uses. It is kept on ``app.state.parts`` for the
    operator's tools and the tests.
    """

    settings: Settings
    store: Store
    links: RelayHub
    relays: RelayRouter
    cluster: ClusterRouter | None
    auth: Authenticator
    login_limiter: LoginRateLimiter
    streams: StreamGuard
    viewer_streams: ViewerStreams
    bus: EventBus
    events: ConversationEvents
    inventory: Inventory
    # who is in control of each desktop (docs/control.md)
    control: ControlService
    actions: ActionRunner
    screen: ScreenTool
    viewer: ViewerService
    audio: AudioService
    novnc: NovncAssets
    chat: ChatService
    # recordings of desktops (docs/recording.md)
    recordings: RecordingService | None = None


def build_control(
    settings: Settings,
    store: Store,
    bus: EventBus,
    inventory: Inventory,
    events: ConversationEvents,
    relays: RelayRouter | None = None,
) -> ControlService:
    """The control service, its store chosen by ``RELAYDESK_REDIS_URL``, fed by the inventory
    (rows that end) and the relays (a person at a host's real screen)."""
    control = ControlService(
        create_control_store(settings.redis_url),
        PolicyBook.from_settings(settings),
        bus,
        store,
        store,
        directory=inventory,
    )
    inventory.add_listener(control.row_changed)
    if relays is not None:
        release = functools.partial(release_held, relays, settings.request_timeout_s)
        control.use_releaser(release)
    inventory.use_control(control.annotate)
    events.use_control(control.annotate)
    return control


async def release_held(relays: RelayRouter, timeout_s: float, key: DesktopKey) -> None:
    """Ask the desktop's relay to let go of what an agent held there (best effort: a relay
    that is away has released it with its display's connection anyway)."""
    args = ops.SessionArgs(desktop_session_id=key.desktop_session_id)
    try:
        await call(relays, RelayId(key.relay_id), ops.INPUT_RELEASE, args, timeout_s)
    except OpError as err:
        log.info("held input on %s not released: %s", key.desktop_session_id, err.message)


async def _prune_forever(inventory: Inventory, store: Store, settings: Settings) -> None:
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


async def _purge_recordings_forever(recordings: RecordingService, settings: Settings) -> None:
    """Hourly: recordings that ended more than ``RELAYDESK_RECORDING_RETENTION_DAYS`` ago."""
    while True:
        try:
            cutoff = utc_now() - timedelta(days=settings.recording_retention_days)
            gone = await recordings.purge(int(cutoff.timestamp() * 1000))
            if gone:
                log.info("purged %d recordings past their retention", gone)
        except Exception:
            log.exception("purging recordings failed")
        await asyncio.sleep(PRUNE_INTERVAL_S)


def build_recordings(
    settings: Settings,
    store: Store,
    bus: EventBus,
    relays: RelayRouter,
    inventory: Inventory,
    events: ConversationEvents,
    control: ControlService,
) -> RecordingService:
    """The recordings, fed by the relays (segments) and the inventory (desktops that end);
    listed rows say which desktops are recorded."""
    recordings = RecordingService(
        RecordingFiles(recordings_path(settings)),
        relays,
        settings.request_timeout_s,
        store,
        bus,
    )
    relays.add_observer(recordings)
    control.state_listeners.append(recordings.control_changed)
    inventory.add_listener(recordings.row_changed)

    async def annotate(rows: Sequence[DesktopRow]) -> list[DesktopRow]:
        return await recordings.annotate(await control.annotate(rows))

    inventory.use_control(annotate)
    events.use_control(annotate)
    return recordings


async def _cancelled(task: asyncio.Task[None]) -> None:
    await cancel_and_wait(task)


@contextlib.asynccontextmanager
async def assemble(settings: Settings) -> AsyncIterator[ServerParts]:
    """Open the database (migrated when configured) and build every part on it; close them
    all, in reverse, on exit."""
    if settings.migrate_on_start:
        await upgrade(settings.database_url)
    store = await Store.open(settings.database_url)
    links = RelayHub(store)
    presence = asyncio.create_task(links.keep_presence(settings.presence_interval_s))
    try:
        async with contextlib.AsyncExitStack() as stack:
            await stack.enter_async_context(shared_caches(settings.redis_url, store))
            routed = await stack.enter_async_context(routing(settings, links))
            relays = routed.router
            limiter = await stack.enter_async_context(login_limits(settings))
            await stack.enter_async_context(
                session_purging(store, settings.session_purge_interval_s)
            )
            streams = await stack.enter_async_context(stream_guard(store, settings))
            auth = Authenticator(store)
            bus = create_event_bus(settings.redis_url)
            stack.push_async_callback(bus.close)
            inventory = Inventory(
                store,
                relays,
                probe_timeout_s=settings.request_timeout_s,
                max_rows=settings.max_desktops_per_relay,
            )
            events = ConversationEvents(bus, store)
            stack.push_async_callback(events.aclose)
            inventory.add_batch_listener(events.inventory_changed)
            if not settings.redis_url:
                # One replica: no relay is connected yet, so nothing confirms last run's rows.
                await inventory.forget_connections(r.relay_id for r in await store.list_relays())
            relays.add_observer(inventory)
            control = build_control(settings, store, bus, inventory, events, relays)
            relays.add_observer(control)
            await control.start(replicas=settings.clustered)
            stack.push_async_callback(control.aclose)
            pruner = asyncio.create_task(
                _prune_forever(inventory, store, settings), name="inventory-prune"
            )
            stack.push_async_callback(_cancelled, pruner)
            recordings = build_recordings(settings, store, bus, relays, inventory, events, control)
            stack.push_async_callback(recordings.aclose)
            recording_purger = asyncio.create_task(
                _purge_recordings_forever(recordings, settings), name="recordings-purge"
            )
            stack.push_async_callback(_cancelled, recording_purger)
            registry = ActionRegistry(ACTIONS)
            actions = ActionRunner(
                registry, ActionParts(settings, store, relays, inventory, control, recordings)
            )
            screen = start_screen(relays, store, settings, registry, routed.issuers)
            viewer = ViewerService(settings, store, relays, inventory, control)
            viewer.viewer_listeners.append(recordings.viewer_changed)
            stack.callback(viewer.close_all, "server shutting down")
            parts = ServerParts(
                settings=settings,
                store=store,
                links=links,
                relays=relays,
                cluster=routed.cluster,
                auth=auth,
                login_limiter=limiter,
                streams=streams,
                viewer_streams=ViewerStreams(store, streams, settings.secret_key),
                bus=bus,
                events=events,
                inventory=inventory,
                control=control,
                actions=actions,
                screen=screen,
                viewer=viewer,
                audio=AudioService(viewer),
                novnc=NovncAssets(),
                chat=build_chat(auth, store, inventory, actions, events),
                recordings=recordings,
            )
            try:
                yield parts
            finally:
                presence.cancel()
                await links.close_all("server shutting down")
    finally:
        presence.cancel()
        await store.close()
