"""An agent's first steps over MCP: list the tools, take a screenshot, observe a window.

Uses the official MCP SDK (``mcp``, installed with relaydesk) over Streamable HTTP::

    export RELAYDESK_SERVER_URL=http://127.0.0.1:8400 RELAYDESK_API_TOKEN=rdk_…
    export RELAYDESK_CONVERSATION_ID=…   # relaydesk admin list shows the conversations
    python examples/mcp_agent.py --out screen.png

It starts the relay's ``main`` desktop when none runs (the token's user needs role ``write``),
saves the screenshot, and prints the accessibility tree of the first window it finds (waiting
up to 30 s for one on a desktop that has just started). docs/mcp.md
explains the tools, their results and their errors.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import sys
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

WINDOW_WAIT_S = 30


def answer(result: types.CallToolResult) -> dict[str, Any]:
    """A tool's JSON answer; a tool error ends the script with its code and message."""
    text = next(c.text for c in result.content if isinstance(c, types.TextContent))
    body: dict[str, Any] = json.loads(text)
    if result.is_error:
        error = body["error"]
        hint = error.get("suggestion") or error.get("hint") or ""
        sys.exit(f"{error['code']}: {error['message']} {hint}".strip())
    return body


async def run(url: str, token: str, conversation: str, out: Path) -> None:
    endpoint = f"{url.rstrip('/')}/api/v1/conversations/{conversation}/mcp"
    headers = {"Authorization": f"Bearer {token}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=120) as http,
        Client(streamable_http_client(endpoint, http_client=http)) as desk,
    ):
        listed = await desk.list_tools()
        print("tools:", ", ".join(tool.name for tool in listed.tools))

        if not answer(await desk.call_tool("desktop_list_active", {}))["desktops"]:
            started = answer(await desk.call_tool("desktop_start", {}))
            print("started:", started["desktop"]["desktop_session_id"])

        shot = await desk.call_tool("screen", {"action": "screenshot"})
        info = answer(shot)  # width, height, screen_revision, … (the picture is image content)
        image = next(c for c in shot.content if isinstance(c, types.ImageContent))
        await asyncio.to_thread(out.write_bytes, base64.b64decode(image.data))
        print(
            f"screenshot: {info['width']}x{info['height']} {image.mime_type} -> {out} "
            f"(screen_revision {info['screen_revision']})"
        )

        window = await first_window(desk)
        if window is None:
            print(f"no window on the accessibility bus after {WINDOW_WAIT_S} s: nothing to observe")
            return
        seen = answer(await desk.call_tool("desktop_observe", {"window": window["id"]}))
        print(f"{window['name']}: {seen['nodes']} elements (snapshot {seen['snapshot']}):")
        print(seen["text"])


async def first_window(desk: Client) -> dict[str, Any] | None:
    """The first window ``desktop_apps`` lists; a desktop that just started shows its first
    windows within seconds, so it is asked again for up to ``WINDOW_WAIT_S``."""
    for _ in range(WINDOW_WAIT_S):
        apps = answer(await desk.call_tool("desktop_apps", {}))  # what runs, with its windows
        windows = [w for app in apps.get("running", []) for w in app["windows"]]
        if windows:
            return dict(windows[0])
        await asyncio.sleep(1)
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("screen.png"), help="screenshot file")
    args = parser.parse_args()
    try:
        url, token = os.environ["RELAYDESK_SERVER_URL"], os.environ["RELAYDESK_API_TOKEN"]
        conversation = os.environ["RELAYDESK_CONVERSATION_ID"]
    except KeyError as missing:
        sys.exit(f"set {missing.args[0]} (see the top of this file)")
    asyncio.run(run(url, token, conversation, args.out))


if __name__ == "__main__":
    main()
