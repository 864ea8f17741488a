"""relaydesk's computer-use door for one desktop, and the command line of the two examples
that drive one with a vendor's SDK (examples/anthropic_agent.py, examples/openai_agent.py).

Keep this file beside the example you copy: the example imports it by name.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

import httpx


class ComputerUseDoor:
    """relaydesk's door for ``VENDOR``'s computer-use tool on one desktop."""

    VENDOR = ""

    def __init__(
        self,
        server: str,
        conversation: str,
        relay: str,
        token: str,
        kind: str = "virtual",
        slot: str = "main",
    ) -> None:
        self.url = (
            f"{server.rstrip('/')}/api/v1/conversations/{conversation}/computer-use/"
            f"{self.VENDOR}/{relay}/{kind}/{slot}"
        )
        self.http = httpx.Client(headers={"Authorization": f"Bearer {token}"}, timeout=120)

    def tool_response(self) -> httpx.Response:
        """``GET …/tool``: the tool definition to send the model."""
        response = self.http.get(f"{self.url}/tool")
        response.raise_for_status()
        return response

    def call(self, tool_call: dict[str, Any]) -> dict[str, Any]:
        """What the model expects back for one tool call, as it emitted it (input that does not
        fit the tool is answered in the same shape, with a 400)."""
        response = self.http.post(self.url, json=tool_call)
        if response.status_code not in (200, 400):
            response.raise_for_status()
        return dict(response.json())


def command_line(description: str, model: str) -> tuple[argparse.Namespace, str]:
    """The example's arguments (``--server``, ``--conversation``, ``--relay``, ``--slot``,
    ``--model``, the task) and the relaydesk API token from ``RELAYDESK_API_TOKEN``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--server", required=True)
    parser.add_argument("--conversation", required=True)
    parser.add_argument("--relay", required=True)
    parser.add_argument("--slot", default="main")
    parser.add_argument("--model", default=model)
    parser.add_argument("task")
    args = parser.parse_args()
    token = os.environ.get("RELAYDESK_API_TOKEN")
    if not token:
        parser.error("set RELAYDESK_API_TOKEN")
    return args, token
