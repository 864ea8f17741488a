"""The server's composition root: its Starlette application, its routes and its start-up.

:func:`create_app` checks the settings and returns the application; on start-up its lifespan
builds the server's parts (``server.assembly``) and then the routes from them
(:func:`route_table`): each route factory receives only the parts it uses. Shutdown runs in
reverse. docs/architecture.md ("The server's floor plan") gives the order of the floors.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import BaseRoute

from server.actions.routes import action_routes
from server.assembly import ServerParts, assemble
from server.auth.addresses import parse_networks
from server.auth.errors import AuthError, auth_error_handler
from server.auth.routes import AuthRoutes
from server.boundary.body import ROUTING_CODES, routing_error
from server.boundary.hosts import HostPolicy
from server.boundary.middleware import InputBoundary
from server.cdp.endpoint import CdpEndpoint
from server.chat.routes import chat_routes
from server.chat.web import web_routes
from server.cluster.internal import internal_routes
from server.computer_use.endpoint import ComputerUseEndpoint
from server.config import ConfigError, Settings
from server.control.policy import PolicyBook
from server.csp import PolicedStarlette
from server.cua.endpoint import CuaEndpoint
from server.errors import error_handler
from server.events.routes import event_routes
from server.files.routes import file_routes
from server.health import health_routes
from server.mcp.endpoint import McpEndpoint
from server.metrics.endpoint import MetricSources, metrics_routes
from server.openapi.document import openapi_routes
from server.recordings.routes import recording_routes
from server.relays.endpoint import relay_route
from server.viewer.assets import check_novnc_tree
from server.viewer.clipboard_image import clipboard_image_route
from server.viewer.clipboard_state import clipboard_state_route
from server.viewer.control_stream import ControlFeeds, control_routes
from server.viewer.keyboard_state import keyboard_state_route
from server.viewer.routes import viewer_routes
from wire.errors import RelaydeskError

log = logging.getLogger(__name__)


def check_settings(settings: Settings) -> None:
    """Refuse a configuration that cannot work (``ConfigError`` naming the setting), before
    anything starts."""
    settings.check()
    try:
        parse_networks(settings.trusted_proxies)
    except ValueError as err:
        raise ConfigError(f"RELAYDESK_TRUSTED_PROXIES: {err}") from None
    PolicyBook.from_settings(settings)  # a bad RELAYDESK_AGENT_GRANT_RELAYS fails here
    check_novnc_tree()  # the viewer's code is the server's own pinned noVNC, whole


def route_table(parts: ServerParts, mcp: McpEndpoint) -> list[BaseRoute]:
    """Every route of the server, each built from the parts it uses."""
    settings = parts.settings
    cluster = parts.cluster
    cua = CuaEndpoint(
        settings.max_body_bytes, parts.store, parts.streams, parts.relays, parts.actions
    )
    computer_use = ComputerUseEndpoint(
        settings.max_body_bytes,
        parts.store,
        parts.streams,
        parts.actions,
        parts.control.approvals,
    )
    metrics = MetricSources(
        settings.metrics_token,
        parts.store,
        parts.links,
        cluster,
        parts.viewer,
        parts.audio,
        parts.bus,
        parts.screen.revisions,
    )
    recorded = parts.recordings.annotate if parts.recordings is not None else None
    feeds = ControlFeeds(parts.bus, parts.control, parts.inventory, recorded)
    return [
        *health_routes(parts.store, parts.links, cluster.redis_ok if cluster else None),
        *AuthRoutes(parts.auth, settings, parts.login_limiter).routes(),
        relay_route(parts.store, parts.links, settings),
        *internal_routes(cluster, parts.screen, settings),
        *metrics_routes(metrics),
        *openapi_routes(parts.actions.registry),
        # the inventory, the actions, the events
        *action_routes(parts.auth, parts.actions),
        *event_routes(parts.auth, parts.store, parts.streams, parts.events),
        # the viewer: the page, its VNC and audio WebSockets, noVNC, its control feed
        *viewer_routes(parts.relays, parts.viewer, parts.audio, parts.novnc, parts.viewer_streams),
        *control_routes(feeds, parts.viewer_streams),
        keyboard_state_route(parts.store, parts.relays, settings.secret_key),
        clipboard_state_route(parts.store, parts.relays, settings.secret_key),
        clipboard_image_route(parts.store, parts.relays, settings.secret_key),
        # chat and the web app
        *chat_routes(parts.chat),
        *web_routes(),
        # agents' doors: MCP, Cua's computer-server protocol, the vendors' computer-use tools
        *mcp.routes(),
        *cua.routes(),
        *computer_use.routes(),
        # the desktop's browser over CDP, for agent frameworks
        *CdpEndpoint(parts.store, parts.streams, parts.actions).routes(),
        # files into and out of desktops' homes, as byte streams
        *file_routes(parts.auth, parts.actions),
        # recordings: their list, timeline, video and trajectory export
        *recording_routes(parts.auth, parts.actions, parts.recordings),
    ]


def create_app(settings: Settings) -> Starlette:
    """Build the application; the database opens (and migrates) and the routes are built on
    start-up."""
    check_settings(settings)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with assemble(settings) as parts:
            mcp = McpEndpoint(
                settings.max_body_bytes, parts.auth, parts.streams, parts.actions, parts.relays
            )
            app.router.routes[:0] = route_table(parts, mcp)
            app.state.parts = parts
            async with mcp.running():
                log.info("server ready on %s:%s", settings.host, settings.port)
                yield

    policy = HostPolicy.build(settings.public_url, settings.allowed_hosts)
    # The policy wraps the whole app: the boundary's refusals and Starlette's 500 carry it too.
    return PolicedStarlette(
        routes=[],
        middleware=[Middleware(InputBoundary, policy=policy)],
        lifespan=lifespan,
        exception_handlers={
            AuthError: auth_error_handler,
            RelaydeskError: error_handler,
            **dict.fromkeys(ROUTING_CODES, routing_error),
        },
    )
