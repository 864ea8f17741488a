"""A reader of the docs, running their code blocks against a server of their own: the
reader's URL, API token, conversation and relay go where a block leaves them for the reader,
nothing else changes (tests/support/doc_blocks.py reads the blocks)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from tests.support.cua import QUIET, require_cua_venv
from tests.support.doc_blocks import CodeBlock
from tests.support.processes import scaled

REPO_ROOT: Final = Path(__file__).resolve().parents[2]
VENV_BIN: Final = Path(sys.executable).parent
# What the docs leave for the reader to fill in; none may be left in a block that runs.
PLACEHOLDERS: Final = re.compile(r"rdk_…|127\.0\.0\.1:8400|desk\.example\.org|\bHOST\b|\bCONV\b")
# Top-level ``await`` as a reader runs it (a notebook, ``python -m asyncio``).
ASYNC_RUNNER: Final = """
import ast, asyncio, sys
code = compile(sys.stdin.read(), sys.argv[1], "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
async def main():
    result = eval(code, {"__name__": "__main__"})
    if result is not None:
        await result
asyncio.run(main())
"""


@dataclass(frozen=True)
class Reader:
    """Someone following the docs with their own server, token, conversation and relay."""

    url: str
    token: str
    conversation_id: str
    relay: str

    def text(self, block: CodeBlock) -> str:
        """The block with the reader's own values in the places the docs leave for them."""
        cid = self.conversation_id
        places = [
            (r"https?://(127\.0\.0\.1:8400|HOST|desk\.example\.org)", self.url),
            (r"rdk_…|rdk_YOUR_API_TOKEN", self.token),
            (r"RELAYDESK_CONVERSATION_ID=…", f"RELAYDESK_CONVERSATION_ID={cid}"),
            (r"--conversation ID\b", f"--conversation {cid}"),
            (r"/conversations/CONV/", f"/conversations/{cid}/"),
            (r"/cua/my-relay/", f"/cua/{self.relay}/"),
        ]
        text = block.text
        for pattern, value in places:
            text = re.sub(pattern, value.replace("\\", "\\\\"), text)
        left = PLACEHOLDERS.findall(text)
        assert not left, (block.where, left)  # every place left for the reader is filled
        return text

    def run(self, block: CodeBlock, cwd: Path) -> subprocess.CompletedProcess[str]:
        """Run the block in ``cwd`` (which gets the checkout's ``examples/`` and a home of its
        own), with the checkout's virtualenv first on ``PATH``; Cua's client in its own."""
        text = self.text(block)
        home = cwd / "home"
        home.mkdir()
        (home / ".relaydesk-token").write_text(self.token)  # what mcp.md reads from there
        (cwd / "examples").symlink_to(REPO_ROOT / "examples")
        env = {
            "PATH": f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}",
            "HOME": str(home),
            "LANG": "C.UTF-8",
            **QUIET,
        }
        stdin: int | None = subprocess.DEVNULL
        if block.kind == "shell":
            argv = ["bash", "-euo", "pipefail", "-c", text]
        elif "await " in text and "async def" not in text:
            argv, stdin = [str(require_cua_venv()), "-c", ASYNC_RUNNER, block.where], None
        else:
            # The Python quick start reads the server and token from the environment.
            env |= {"RELAYDESK_URL": self.url, "RELAYDESK_TOKEN": self.token}
            argv = [sys.executable, "-c", text]
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
