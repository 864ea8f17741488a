"""What ``relaydesk up`` prints for agents: the API token, the conversation, the relay, and
ready-to-paste MCP (HTTP and stdio) and Cua client settings."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

from relaydesk.saved import SavedClient

# Printed in place of a token that was shown when it was made.
TOKEN_PLACEHOLDER = "rdk_YOUR_API_TOKEN"  # noqa: S105 - a placeholder


def agent_settings(client: SavedClient, client_file: Path, shown: SavedClient | None) -> str:
    """The block for agents. ``shown`` is the client when its token is new and may be printed
    (once); otherwise the token is named by the file that holds it."""
    token = shown.api_token if shown else TOKEN_PLACEHOLDER
    if shown:
        token_line = f"API token (for admin, shown once): {token}"
    else:
        token_line = (
            f"API token: the one printed when it was made, in {client_file} "
            "(relaydesk admin create-token admin makes another)"
        )
    cid = client.conversation_id
    lines = [
        f"For agents (saved in {client_file}, where relaydesk desktops, files, mcp and",
        "admin login-link find them):",
        f"  {token_line}",
        f"  conversation: {cid}",
        f"  relay: {client.relay}",
        "",
        "MCP over HTTP (client configuration):",
        _indent(json.dumps({"mcpServers": {"relaydesk": _mcp_http(client, token)}}, indent=2)),
        "",
        "MCP over stdio (client configuration):",
        _indent(
            json.dumps({"mcpServers": {"relaydesk": _stdio(client, shown, client_file)}}, indent=2)
        ),
        "",
        "Cua (the cua-computer client, Python):",
        _indent(_cua(client, token)),
        "",
    ]
    return "\n".join(lines)


def _mcp_http(client: SavedClient, token: str) -> dict[str, Any]:
    return {
        "type": "http",
        "url": f"{client.server_url}/api/v1/conversations/{client.conversation_id}/mcp",
        "headers": {"Authorization": f"Bearer {token}"},
    }


def _stdio(client: SavedClient, shown: SavedClient | None, client_file: Path) -> dict[str, Any]:
    """``relaydesk mcp`` with the token in its environment when it may be printed; otherwise
    it reads the token saved for this server, from the data directory it is told."""
    # The console script when it is on PATH, else this interpreter's module.
    command = shutil.which("relaydesk")
    argv = [command] if command else [sys.executable, "-m", "relaydesk"]
    args = ["mcp", "--server", client.server_url, "--conversation", client.conversation_id]
    env = (
        {"RELAYDESK_API_TOKEN": shown.api_token}
        if shown
        else {"RELAYDESK_DATA_DIR": str(client_file.parent)}
    )
    return {"command": argv[0], "args": [*argv[1:], *args], "env": env}


def _cua(client: SavedClient, token: str) -> str:
    base = (
        f"{client.server_url}/api/v1/conversations/{client.conversation_id}"
        f"/cua/{client.relay}/virtual/main"
    )
    return "\n".join(
        [
            "from computer import Computer",
            "computer = Computer(",
            '    os_type="linux",',
            "    use_host_computer_server=True,",
            f'    api_base_url="{base}",',
            f'    api_headers={{"Authorization": "Bearer {token}"}},',
            ")",
        ]
    )


def _indent(text: str) -> str:
    return "\n".join(f"    {line}" for line in text.splitlines())
