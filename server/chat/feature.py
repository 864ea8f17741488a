"""The chat feature's wiring: its routes and the service built in the app's lifespan."""

from __future__ import annotations

from typing import Any

from starlette.routing import BaseRoute

from server.actions.invoke import invoke
from server.auth.principal import Principal
from server.chat.ports import ChatService
from server.chat.routes import chat_routes
from server.chat.web import web_routes
from server.events.hub import publish_conversation
from server.services import Services
from server.viewer.clipboard_state import clipboard_state_route
from server.viewer.keyboard_state import keyboard_state_route


async def chat_invoke(
    services: Services, principal: Principal, name: str, body: dict[str, Any]
) -> tuple[int, dict[str, Any]]:
    """The typed actions, audited with ``source=chat``."""
    return await invoke(services, principal, name, body, source="chat")


def routes() -> list[BaseRoute]:
    """Chat API, the viewer's keyboard-state and clipboard endpoints, and the web app (``/``,
    ``/app/…``)."""
    return [*chat_routes, keyboard_state_route, clipboard_state_route, *web_routes()]


def build_chat() -> ChatService:
    return ChatService(invoke=chat_invoke, publish=publish_conversation)
