"""The client settings ``relaydesk up`` saves for the other commands: the server's URL, an API
token, the conversation and the relay, in ``client.json`` under the data directory (mode 0600).

``relaydesk desktops``, ``files``, ``mcp`` and ``admin login-link`` read it when no flag or
environment variable names the server, so after ``relaydesk up --port 9000`` they talk to port
9000, not to the default 8400. The saved token is only ever sent to the saved server.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Final

FILE_NAME: Final = "client.json"


@dataclass(frozen=True)
class SavedClient:
    """What ``relaydesk up`` last started: where it serves, and how an agent gets in."""

    server_url: str
    api_token: str
    conversation_id: str
    relay: str


def path(data_dir: Path | None = None) -> Path:
    """The file under ``data_dir`` (default: ``RELAYDESK_DATA_DIR``, as the server uses it)."""
    from server.config import default_data_dir

    return (data_dir or default_data_dir()) / FILE_NAME


def load(data_dir: Path | None = None) -> SavedClient | None:
    """The saved settings, or None when there are none (or they cannot be read)."""
    try:
        data = json.loads(path(data_dir).read_text(encoding="utf-8"))
        return SavedClient(
            server_url=str(data["server_url"]),
            api_token=str(data["api_token"]),
            conversation_id=str(data["conversation_id"]),
            relay=str(data["relay"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def save(saved: SavedClient, data_dir: Path) -> Path:
    """Write the settings, readable by this user alone; returns the file's path."""
    target = path(data_dir)
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    partial = target.with_suffix(".tmp")
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(asdict(saved), handle, indent=2)
        handle.write("\n")
    os.chmod(partial, 0o600)  # an older file's mode is not kept by the replace below
    partial.replace(target)
    return target


def same_server(url: str, saved: SavedClient) -> bool:
    """Whether ``url`` is the saved server (the saved token may be sent there)."""
    return url.rstrip("/") == saved.server_url.rstrip("/")
