"""What a server start loads: the MCP SDK loads with the first MCP request, the cluster's HTTP
and Redis clients only when replicas share Redis, so a restarted server is ready sooner.

Checked in a fresh interpreter (this one has loaded everything other tests use): the real app
under uvicorn starts, answers ``/readyz``, and only then serves two MCP requests at once.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.processes import scaled

pytestmark = pytest.mark.unit

REPO_ROOT = Path(__file__).resolve().parents[2]
LOADED_ON_USE = ("mcp", "mcp_types", "aiohttp", "redis")

_SERVE = """
import asyncio, json, sys
from pathlib import Path

import httpx

from tests.support.stack import inprocess_server, seed_database

LOADED_ON_USE = {loaded!r}
TOOLS_LIST = {{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}}


def loaded():
    return [name for name in LOADED_ON_USE if name in sys.modules]


async def main(data_dir):
    seed = await seed_database(Path(data_dir))
    headers = {{"Authorization": f"Bearer {{seed.api_token}}",
               "Accept": "application/json, text/event-stream"}}
    mcp = f"/api/v1/conversations/{{seed.conversation_id}}/mcp"
    async with inprocess_server(seed) as (_app, url):
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as client:
            ready = (await client.get("/readyz")).status_code
            at_start = loaded()
            answers = await asyncio.gather(
                *(client.post(mcp, json=TOOLS_LIST) for _ in range(2))
            )
    tools = [len(a.json()["result"]["tools"]) if a.status_code == 200 else a.text
             for a in answers]
    print(json.dumps({{"ready": ready, "at_start": at_start, "tools": tools,
                      "after_mcp": loaded()}}))


asyncio.run(main(sys.argv[1]))
"""


def test_the_mcp_sdk_and_cluster_clients_load_when_used(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _SERVE.format(loaded=LOADED_ON_USE), str(tmp_path / "data")],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=scaled(90),
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["ready"] == 200
    assert seen["at_start"] == []
    tools = seen["tools"]
    assert all(isinstance(count, int) and count > 0 for count in tools), tools
    assert {"mcp", "mcp_types"} <= set(seen["after_mcp"])
    assert not {"aiohttp", "redis"} & set(seen["after_mcp"])
