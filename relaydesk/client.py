"""The Python client, which ships on its own as ``relaydesk-client`` (``clients/python``,
importable as ``relaydesk_client``): this name re-exports it for code written against it."""

from relaydesk_client import *  # noqa: F403
from relaydesk_client import __all__ as _client_names
from relaydesk_client.errors import answer_of

__all__ = [*_client_names, "answer_of"]
