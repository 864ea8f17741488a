"""The Python quick start of docs/http-api.md, run as written against a real server and relay.

The code block is read from the document itself, so the quick start cannot drift from what
works: token → conversation → start → screenshot → guarded click → type → stop.
:func:`quick_start_python` is shared with the test that runs it from an empty virtualenv with
only the client distribution installed (``test_install.py``).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from relaydesk_client import ApiError, RelaydeskClient
from tests.e2e.viewer_stack import ViewerStack, viewer_stack

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

DOC = Path(__file__).resolve().parents[2] / "docs" / "http-api.md"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def quick_start_python() -> str:
    text = DOC.read_text()
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "the quick start has a Python block"
    return match.group(1)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ViewerStack]:
    async with viewer_stack(tmp_path_factory.mktemp("quickstart")) as stack:
        yield stack


async def test_the_python_quick_start_runs_as_written(
    stack: ViewerStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RELAYDESK_SERVER_URL", stack.url)
    monkeypatch.setenv("RELAYDESK_API_TOKEN", stack.seed.api_token)
    monkeypatch.chdir(tmp_path)
    code = compile(quick_start_python(), str(DOC), "exec")
    # The client is synchronous and the server runs on this loop: run it in a thread.
    await asyncio.to_thread(exec, code, {"__name__": "quickstart"})

    image = (tmp_path / "screen.png").read_bytes()
    assert image.startswith(PNG_MAGIC)
    audit = [(row.op, row.outcome) for row in await stack.app.state.parts.store.list_audit()]
    for op in ("start", "screen.screenshot", "screen.click", "screen.type", "screen.key"):
        assert any(name.endswith(op) for name, _ in audit), (op, audit)
    live = await stack.action("desktop_list_active")
    assert live["desktops"] == []  # the quick start stopped what it started


async def test_errors_name_the_field_the_caller_sent(stack: ViewerStack) -> None:
    """``key`` (the schema's name), never the relay's internal ``keys``."""
    cid = stack.seed.conversation_id

    def call() -> list[ApiError]:
        errors = []
        with RelaydeskClient(stack.url, stack.seed.api_token) as desk:
            started = desk.start(cid, slot="errors")
            session = started.desktop["desktop_session_id"]
            try:
                desk.action("desktop_start", cid, slot="Not A Slot")
            except ApiError as err:
                errors.append(err)
            try:
                desk.key(cid, "NoSuchKey", desktop_session_id=session)
            except ApiError as err:
                errors.append(err)
            desk.stop(cid, started)
        return errors

    slot, key = await asyncio.to_thread(call)
    assert (slot.status, slot.code, slot.details.get("field")) == (400, "invalid_args", "slot")
    assert (key.status, key.code, key.details.get("field")) == (400, "invalid_args", "key")
    assert key.message.startswith("key:"), key.message
