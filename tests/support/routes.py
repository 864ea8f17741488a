"""The routes of a real, started server app (its lifespan builds them from its parts)."""

from __future__ import annotations

import asyncio
import functools
import tempfile
from pathlib import Path

from starlette.routing import BaseRoute

from server.app import create_app
from server.config import Settings


async def _started_routes() -> list[BaseRoute]:
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite+aiosqlite:///{Path(folder) / 'relaydesk.db'}"
        app = create_app(Settings(secret_key="k", data_dir=Path(folder), database_url=url))
        async with app.router.lifespan_context(app):
            return list(app.routes)


@functools.cache
def routes_of_a_fresh_app() -> tuple[BaseRoute, ...]:
    """Every route of an app started on an empty database (built once per process)."""
    return tuple(asyncio.run(_started_routes()))
