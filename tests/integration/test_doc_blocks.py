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
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from tests.support.a11y_stack import FORM, A11yStack, a11y_stack
from tests.support.cua import QUIET, require_cua_venv
from tests.support.doc_blocks import CodeBlock, code_blocks
from tests.support.processes import scaled
from tests.support.stack import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

REPO_ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
DOCS = ("http-api.md", "mcp.md", "cua.md")
BLOCKS = [block for doc in DOCS for block in code_blocks(doc)]
RUNNABLE = [b for b in BLOCKS if b.kind in {"shell", "python"} and b.runnable]
# The blocks the docs mark as not runnable alone; a new one is a decision, made here.
NOT_RUNNABLE = {"http-api.md: actions.invoke inside the server"}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
# Top-level ``await`` as a reader runs it (a notebook, ``python -m asyncio``).
ASYNC_RUNNER = """
import ast, asyncio, sys
code = compile(sys.stdin.read(), sys.argv[1], "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
async def main():
    result = eval(code, {"__name__": "__main__"})
    if result is not None:
        await result
asyncio.run(main())
"""


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[A11yStack]:
    async with a11y_stack(tmp_path_factory.mktemp("doc-blocks"), [FORM]) as stack:
        yield stack


def reader_text(block: CodeBlock, stack: A11yStack) -> str:
    """The block with the reader's own values in the places the docs leave for them."""
    url, token, cid = stack.url, stack.seed.api_token, stack.seed.conversation_id
    relay = stack.seed.relay["name"]
    places = [
        (r"https?://(127\.0\.0\.1:8400|HOST|desk\.example\.org)", url),
        (r"rdk_…|rdk_YOUR_API_TOKEN", token),
        (r"RELAYDESK_CONVERSATION_ID=…", f"RELAYDESK_CONVERSATION_ID={cid}"),
        (r"--conversation ID\b", f"--conversation {cid}"),
        (r"/conversations/CONV/", f"/conversations/{cid}/"),
        (r"/cua/my-relay/", f"/cua/{relay}/"),
    ]
    text = block.text
    for pattern, value in places:
        text = re.sub(pattern, value.replace("\\", "\\\\"), text)
    return text


async def _reader_desktop(stack: A11yStack) -> None:
    """The ``main`` desktop with the form on it, started again if a block stopped it."""
    live = await stack.ok("desktop_list_active")
    if not any(row["slot"] == "main" and row["state"] == "running" for row in live["desktops"]):
        started = await stack.ok("desktop_start", geometry="1280x800", profile="minimal")
        stack.session_id = started["desktop"]["desktop_session_id"]
        stack.display = started["desktop"]["display"]
    await wait_until(lambda: stack.state() != {}, scaled(30), "the form to start")
    await stack.wait_app("a11y_app.py")


def _run(
    block: CodeBlock, text: str, stack: A11yStack, cwd: Path
) -> subprocess.CompletedProcess[str]:
    home = cwd / "home"
    home.mkdir()
    (home / ".relaydesk-token").write_text(stack.seed.api_token)  # what mcp.md reads from there
    (cwd / "examples").symlink_to(REPO_ROOT / "examples")
    env = {
        "PATH": f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        **QUIET,
    }
    if block.kind == "shell":
        argv, stdin = ["bash", "-euo", "pipefail", "-c", text], subprocess.DEVNULL
    elif "await " in text and "async def" not in text:
        argv, stdin = [str(require_cua_venv()), "-c", ASYNC_RUNNER, block.where], None
    else:
        # The Python quick start reads the server and token from the environment, as it says.
        env |= {"RELAYDESK_URL": stack.url, "RELAYDESK_TOKEN": stack.seed.api_token}
        argv, stdin = [sys.executable, "-c", text], subprocess.DEVNULL
    return subprocess.run(
        argv,
        input=text if stdin is None else None,
        stdin=stdin,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=scaled(180),
        check=False,
    )


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
    text = reader_text(block, stack)
    left = re.findall(r"rdk_…|127\.0\.0\.1:8400|desk\.example\.org|\bHOST\b|\bCONV\b", text)
    assert not left, (block.where, left)  # every place left for the reader is filled
    done = await asyncio.to_thread(_run, block, text, stack, tmp_path)
    assert done.returncode == 0, (block.where, done.stdout[-3000:], done.stderr[-3000:])
    if "screen.png" in text:
        assert (tmp_path / "screen.png").read_bytes().startswith(PNG_MAGIC), block.where
