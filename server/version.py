"""The installed relaydesk version, as the server reports it (MCP, OpenAPI)."""

from __future__ import annotations

import importlib.metadata


def server_version() -> str:
    try:
        return importlib.metadata.version("relaydesk")
    except importlib.metadata.PackageNotFoundError:
        return "0"
