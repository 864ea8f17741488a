"""The installed relaydesk version, as the server reports it (MCP, OpenAPI, Cua's ``version``)."""

from __future__ import annotations

import functools
import importlib.metadata


@functools.cache
def server_version() -> str:
    """Read once: the package metadata costs about a millisecond a read."""
    try:
        return importlib.metadata.version("relaydesk")
    except importlib.metadata.PackageNotFoundError:
        return "0"
