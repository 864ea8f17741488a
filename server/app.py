"""The server's Starlette application: routes, shared state and lifecycle.

Each feature contributes its routes here and builds its parts in ``lifespan``, in dependency
order, into one :class:`server.services.Services` that routes read with ``services_of``;
shutdown runs in reverse.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import BaseRoute, WebSocketRoute

from server.auth.errors import AuthError, auth_error_handler
from server.auth.purge import session_purging
from server.auth.routes import auth_routes
from server.auth.streams import stream_guard
from server.boundary.body import ROUTING_CODES, routing_error
from server.boundary.hosts import HostPolicy
from server.boundary.middleware import InputBoundary
from server.cluster.build import login_limits, routing, shared_caches
from server.cluster.internal import internal_routes
from server.config import Settings
from server.csp import PolicedStarlette
from server.cua.endpoint import CuaEndpoint
from server.db.migrate import upgrade
from server.db.store import Store
from server.errors import error_handler
from server.health import health_routes
from server.mcp.endpoint import McpEndpoint
from server.metrics.endpoint import metrics_routes
from server.openapi.document import openapi_routes
from server.relays.endpoint import relay_connect
from server.relays.hub import RelayHub
from server.services import Services, install
from server.viewer.routes import build_viewer, viewer_routes
from wire.errors import RelaydeskError

log = logging.getLogger(__name__)


def _routes() -> list[BaseRoute]:
    routes: list[BaseRoute] = [
        *health_routes,
        *auth_routes,
        WebSocketRoute("/relay/v1/connect", relay_connect),
        *internal_routes(),
        *metrics_routes,
        *openapi_routes,
    ]
    # -- inventory, actions, events (feature: inventory) --
    from server.inventory import feature as inventory_feature

    routes.extend(inventory_feature.routes())
    # -- viewer (feature: viewer): the page, its VNC and audio WebSockets, noVNC --
    routes.extend(viewer_routes)
    # -- chat and web UI (feature: chat) --
    from server.chat import feature as chat_feature

    routes.extend(chat_feature.routes())
    return routes


def create_app(settings: Settings) -> Starlette:
    """Build the application; the database opens (and migrates) on start-up."""
    settings.check()
    # -- MCP (feature: mcp): its route below; it serves requests from the lifespan on --
    mcp = McpEndpoint(settings.max_body_bytes)
    # -- Cua's computer-server protocol (feature: cua): per desktop, sessions kept here --
    cua = CuaEndpoint(settings.max_body_bytes)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if settings.migrate_on_start:
            await upgrade(settings.database_url)
        store = await Store.open(settings.database_url)
        links = RelayHub(store)
        presence = asyncio.create_task(links.keep_presence(settings.presence_interval_s))
        async with contextlib.AsyncExitStack() as features:
            await features.enter_async_context(shared_caches(settings.redis_url, store))
            routed = await features.enter_async_context(routing(settings, links))
            login_limiter = await features.enter_async_context(login_limits(settings))
            hub = routed.router
            await features.enter_async_context(
                session_purging(store, settings.session_purge_interval_s)
            )
            streams = await features.enter_async_context(stream_guard(store, settings))
            # -- inventory, actions, events (feature: inventory) --
            from server.inventory import feature as inventory_feature

            parts = await features.enter_async_context(
                inventory_feature.lifespan(store, hub, settings)
            )
            # -- viewer (feature: viewer) --
            viewing = build_viewer(settings, store, hub, parts.inventory, parts.control)
            features.callback(viewing.viewer.close_all, "server shutting down")
            # -- chat and web UI (feature: chat) --
            from server.chat import feature as chat_feature

            # -- screen tool (feature: screen) --
            from server.screen import feature as screen_feature

            install(
                app.state,
                Services(
                    settings=settings,
                    store=store,
                    hub=hub,
                    links=links,
                    cluster=routed.cluster,
                    login_limiter=login_limiter,
                    bus=parts.bus,
                    events=parts.events,
                    inventory=parts.inventory,
                    control=parts.control,
                    actions=parts.actions,
                    viewer=viewing.viewer,
                    audio=viewing.audio,
                    novnc_assets=viewing.novnc_assets,
                    chat=chat_feature.build_chat(),
                    screen_tool=screen_feature.start_screen(
                        hub, store, settings, parts.actions, routed.issuers
                    ),
                    streams=streams,
                ),
            )
            await features.enter_async_context(mcp.running())
            log.info("server ready on %s:%s", settings.host, settings.port)
            try:
                yield
            finally:
                presence.cancel()
                await links.close_all("server shutting down")
        await store.close()

    policy = HostPolicy.build(settings.public_url, settings.allowed_hosts)
    # The policy wraps the whole app: the boundary's refusals and Starlette's 500 carry it too.
    return PolicedStarlette(
        routes=[*_routes(), *mcp.routes(), *cua.routes()],
        middleware=[Middleware(InputBoundary, policy=policy)],
        lifespan=lifespan,
        exception_handlers={
            AuthError: auth_error_handler,
            RelaydeskError: error_handler,
            **dict.fromkeys(ROUTING_CODES, routing_error),
        },
    )
