"""``relaydesk mcp``: a stdio MCP server for agent clients, forwarding to a relaydesk server.

The command line only; the forwarding server (``relaydesk.mcp_stdio``) is imported when the
command runs, so the rest of the CLI does not load the MCP SDK.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Final

from relaydesk.desktops_cli import (
    SERVER_ENV,
    TOKEN_ENV,
    UsageError,
    api_token,
    saved_for,
    server_url,
)

CONVERSATION_ENV: Final = "RELAYDESK_CONVERSATION_ID"
DESCRIPTION: Final = f"""\
Serve MCP on stdin/stdout for an agent client that starts its tools as commands, forwarding
every tool list and call to the relaydesk server's MCP endpoint for one conversation
(Streamable HTTP, /api/v1/conversations/ID/mcp). Tools are the server's typed actions that
your role allows, without conversation_id: desktops, the accessibility tools, the screen tool.

The API token comes from --token-file or {TOKEN_ENV} (`relaydesk admin create-token USER`).
On the machine that runs `relaydesk up`, the server, token and conversation it saved in its
data directory are used when none is given.
A client configuration entry (docs/mcp.md):

  {{"mcpServers": {{"relaydesk": {{"command": "relaydesk",
      "args": ["mcp", "--server", "https://desk.example.org", "--conversation", "ID"],
      "env": {{"{TOKEN_ENV}": "rdk_…"}}}}}}}}

Exit status: 0 when the client closed stdin, 1 when the server refused or could not be
reached (the reason is on stderr), 2 bad usage.
"""


def add_mcp(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "mcp",
        help="MCP server on stdio for agent clients, forwarding to a relaydesk server",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--server",
        default=None,
        help=f"the server's URL ({SERVER_ENV}, else RELAYDESK_PUBLIC_URL, else the one "
        "relaydesk up saved in the data directory, else http://127.0.0.1:8400)",
    )
    p.add_argument(
        "--conversation",
        default=None,
        help=f"the conversation the tools act in ({CONVERSATION_ENV}, else the one "
        "relaydesk up saved)",
    )
    p.add_argument("--token-file", default=None, help=f"file holding an API token ({TOKEN_ENV})")
    p.set_defaults(func=_cmd_mcp)


def _cmd_mcp(args: argparse.Namespace) -> int:
    from relaydesk.mcp_stdio import endpoint_url, run

    try:
        saved = saved_for(args)
        conversation = args.conversation or os.environ.get(CONVERSATION_ENV)
        conversation = conversation or (saved.conversation_id if saved else None)
        if not conversation:
            raise UsageError(f"name a conversation with --conversation or {CONVERSATION_ENV}")
        endpoint = endpoint_url(server_url(args), conversation)
        token = api_token(args)
    except UsageError as err:
        print(f"relaydesk: {err}", file=sys.stderr)
        return 2
    logging.getLogger("httpx2").setLevel(logging.WARNING)
    return run(endpoint, token)
