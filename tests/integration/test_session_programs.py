"""A session program that fails (a browser that crashes at start) is named in the desktop's
status and events, and the desktop runs on: real server, relay and desktop.

The desktop's start-up apps are ``true`` (ends at once, status 0: nothing failed, as when a
person closes a window) and ``false`` (ends at once, status 1: a failure).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio

from tests.e2e.viewer_stack import ViewerStack, viewer_stack
from tests.support.processes import scaled
from tests.support.stack import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

RELAY_ENV = {"RELAYDESK_DESKTOP_APPS": "true,false", "RELAYDESK_WATCHDOG_INTERVAL_S": "0.5"}
FAILED = "false exited with status 1"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ViewerStack]:
    async with viewer_stack(tmp_path_factory.mktemp("session-programs"), RELAY_ENV) as stack:
        yield stack


async def _events(stack: ViewerStack, seen: list[dict[str, Any]]) -> None:
    """Every ``desktop_inventory_changed`` event of the conversation, as a browser reads it."""
    headers = {"Authorization": f"Bearer {stack.seed.api_token}"}
    params = {"conversation_id": stack.seed.conversation_id}
    async with (
        httpx.AsyncClient(
            base_url=stack.url, timeout=httpx.Timeout(scaled(30), read=scaled(120))
        ) as client,
        client.stream("GET", "/api/v1/events", params=params, headers=headers) as response,
    ):
        event = None
        async for line in response.aiter_lines():
            if line.startswith("event: "):
                event = line[len("event: ") :]
            elif line.startswith("data: ") and event == "desktop_inventory_changed":
                seen.append(json.loads(line[len("data: ") :]))


async def test_a_failed_start_program_is_named_in_the_status_and_the_events(stack):
    seen: list[dict[str, Any]] = []
    listening = asyncio.create_task(_events(stack, seen))
    try:
        desktop = await stack.start_desktop()
        session = desktop.desktop_session_id

        async def named() -> bool:
            status = await stack.action("desktop_status", relay=stack.relay_id)
            rows = [r for r in status["desktops"] if r["desktop_session_id"] == session]
            return bool(rows) and rows[0]["reason"] == FAILED

        await wait_until(named, scaled(20), "the status to name the failed program")
        status = await stack.action("desktop_status", relay=stack.relay_id)
        row = next(r for r in status["desktops"] if r["desktop_session_id"] == session)
        assert row["state"] == "running", row  # the desktop runs on without it
        assert "true" not in row["reason"], row  # status 0 is no failure
        listed = await stack.action("desktop_list_active")
        assert [r["reason"] for r in listed["desktops"]] == [FAILED], listed

        def told() -> bool:
            return any(
                r["desktop_session_id"] == session and r.get("reason") == FAILED
                for event in seen
                for r in event.get("changed", [])
            )

        await wait_until(told, scaled(10), "an inventory event naming the failed program")
        assert f"desktop slot=main: {FAILED}" in stack.relay.log_text()
    finally:
        listening.cancel()
        await asyncio.gather(listening, return_exceptions=True)
