"""The server's parts, built once in the app's lifespan and read through one accessor.

``server.app`` builds a :class:`Services` when the app starts and installs it on the app;
routes read it with :func:`services_of` (a request or a WebSocket). Nothing else is kept on
``app.state``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.requests import HTTPConnection

from server.actions.registry import ActionRegistry
from server.auth.ratelimit import LoginRateLimiter
from server.chat.ports import ChatService
from server.config import Settings
from server.control.service import ControlService
from server.db.store import Store
from server.events.bus import Bus
from server.events.hub import ConversationEvents
from server.inventory.service import Inventory
from server.relays.hub import RelayHub
from server.relays.router import RelayRouter
from server.screen.tool import ScreenTool
from server.viewer.assets import NovncAssets
from server.viewer.audio import AudioService
from server.viewer.service import ViewerService

if TYPE_CHECKING:
    from server.auth.streams import StreamGuard
    from server.cluster.router import ClusterRouter


@dataclass(frozen=True)
class Services:
    """Every long-lived part of one server process (dependency order)."""

    settings: Settings
    store: Store
    # ``hub`` reaches any relay (``RelayRouter``); ``links`` holds those connected here.
    hub: RelayRouter
    links: RelayHub
    cluster: ClusterRouter | None
    login_limiter: LoginRateLimiter
    bus: Bus
    events: ConversationEvents
    inventory: Inventory
    # who is in control of each desktop (docs/control.md)
    control: ControlService
    actions: ActionRegistry
    viewer: ViewerService
    audio: AudioService
    novnc_assets: NovncAssets
    chat: ChatService
    screen_tool: ScreenTool
    # long-lived connections: caps per user and address, credentials re-checked while open
    streams: StreamGuard


def install(state: Any, services: Services) -> None:
    """Make ``services`` the app's (``state`` is ``app.state``)."""
    state.services = services


def services_of(conn: HTTPConnection) -> Services:
    """The app's :class:`Services` (a route runs only after the lifespan installed them)."""
    services = getattr(conn.app.state, "services", None)
    if not isinstance(services, Services):
        raise RuntimeError("the server's services are not installed (lifespan not run)")
    return services
