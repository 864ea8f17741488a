"""The Python client, which ships on its own as ``relaydesk-client`` (``clients/python``,
importable as ``relaydesk_client``): this name re-exports it for code written against it."""

from relaydesk_client import (
    ApiError,
    Conversation,
    Desktop,
    DesktopRow,
    RelaydeskClient,
    Screenshot,
    StartedDesktop,
)
from relaydesk_client.errors import answer_of

__all__ = [
    "ApiError",
    "Conversation",
    "Desktop",
    "DesktopRow",
    "RelaydeskClient",
    "Screenshot",
    "StartedDesktop",
    "answer_of",
]
