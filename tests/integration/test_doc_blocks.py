"""Every shell and Python block of docs/http-api.md, docs/mcp.md and docs/cua.md, run as a
reader runs it against a real server, relay and desktop.

The reader's values go where the docs leave them for the reader (the server's URL, the API
token, the conversation id, the relay's name), nothing else changes. Each block runs in a
fresh directory that holds the checkout's ``examples/``, with the checkout's virtualenv first
on ``PATH`` (``python``, ``relaydesk``) and a home of its own; Cua's client runs in the
virtualenv that has it. Before each block the conversation has the desktop a reader has when
following the docs: the relay's ``main`` desktop running the tests' GTK form (the form the
``examples/http_agent.py`` line fills in).

A block that is not meant to run says so on its first line (``# not runnable alone: …``);
the test names those and holds their number, so a block is never left out silently.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from tests.support.a11y_stack import FORM, A11yStack, a11y_stack
from tests.support.doc_blocks import CodeBlock, code_blocks
from tests.support.processes import scaled
from tests.support.reader import Reader
from tests.support.stack import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

DOCS = ("http-api.md", "mcp.md", "cua.md")
BLOCKS = [block for doc in DOCS for block in code_blocks(doc)]
RUNNABLE = [b for b in BLOCKS if b.kind in {"shell", "python"} and b.runnable]
# The blocks the docs mark as not runnable alone; a new one is a decision, made here.
NOT_RUNNABLE = {"http-api.md: actions.invoke inside the server"}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[A11yStack]:
    async with a11y_stack(tmp_path_factory.mktemp("doc-blocks"), [FORM]) as stack:
        yield stack


async def _reader_desktop(stack: A11yStack) -> None:
    """The ``main`` desktop with the form on it, started again if a block stopped it."""
    live = await stack.ok("desktop_list_active")
    if not any(row["slot"] == "main" and row["state"] == "running" for row in live["desktops"]):
        started = await stack.ok("desktop_start", geometry="1280x800", profile="minimal")
        stack.session_id = started["desktop"]["desktop_session_id"]
        stack.display = started["desktop"]["display"]
    await wait_until(lambda: stack.state() != {}, scaled(30), "the form to start")
    await stack.wait_app("a11y_app.py")


async def test_every_block_is_run_or_marked_as_not_runnable() -> None:
    code = [b for b in BLOCKS if b.kind in {"shell", "python"}]
    marked = [b for b in code if not b.runnable]
    described = {f"{b.doc}: {_marked_reason(b)}" for b in marked}
    print(f"{len(RUNNABLE)} blocks run, {len(marked)} marked not runnable: {sorted(described)}")
    assert described == NOT_RUNNABLE
    assert len(RUNNABLE) + len(marked) == len(code)
    by_doc = {doc: sum(1 for b in RUNNABLE if b.doc == doc) for doc in DOCS}
    assert all(by_doc.values()), by_doc  # each document's blocks are found at all


def _marked_reason(block: CodeBlock) -> str:
    return "actions.invoke inside the server" if "actions.invoke" in block.text else block.where


@pytest.mark.parametrize("block", RUNNABLE, ids=[b.where for b in RUNNABLE])
async def test_the_block_runs_as_a_reader_runs_it(
    stack: A11yStack, block: CodeBlock, tmp_path: Path
) -> None:
    await _reader_desktop(stack)
    reader = Reader(
        stack.url, stack.seed.api_token, stack.seed.conversation_id, stack.seed.relay["name"]
    )
    text = reader.text(block)
    done = await asyncio.to_thread(reader.run, block, tmp_path)
    assert done.returncode == 0, (block.where, done.stdout[-3000:], done.stderr[-3000:])
    if "screen.png" in text:
        assert (tmp_path / "screen.png").read_bytes().startswith(PNG_MAGIC), block.where
