"""relaydesk's Python client: ``Desktop.create()`` for one desktop in one call, and
``RelaydeskClient`` for every call of the HTTP API (docs/http-api.md)."""

from relaydesk_client.client import (
    Conversation,
    DesktopRow,
    RelaydeskClient,
    Screenshot,
    StartedDesktop,
)
from relaydesk_client.desktop import Desktop
from relaydesk_client.errors import ApiError

__all__ = [
    "ApiError",
    "Conversation",
    "Desktop",
    "DesktopRow",
    "RelaydeskClient",
    "Screenshot",
    "StartedDesktop",
]
