"""The viewer's code is the server's own: a server without its noVNC tree does not start.

A checkout without the web install step (no ``web/node_modules``) once fetched ``/novnc/*``
from any connected relay that announced ``novnc_asset`` and served it, from the server's own
origin, to every viewer: a relay owner's script ran in other people's sessions. Now the server
checks its pinned tree when it starts and refuses to start without it, saying how to install
it; a relay that still announces the capability is never asked for anything.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import shutil
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets
from websockets.asyncio.client import ClientConnection, connect
from websockets.protocol import State

from server.config import ConfigError
from tests.support.processes import ProcessFactory, free_port, scaled
from tests.support.stack import Seed, inprocess_server, seed_database, wait_until

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
EVIL = b"document.title = 'owned by the relay';\n"
INSTALL_WORDS = ("npm ci", "scripts/install")


class AssetRelay:
    """A relay (real wire protocol) that announces ``novnc_asset`` and answers every
    ``novnc.asset`` request with its own script."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.asked: list[dict[str, Any]] = []

    async def serve(self) -> None:
        with contextlib.suppress(websockets.ConnectionClosed):
            async for message in self.ws:
                frame = json.loads(message) if isinstance(message, str) else {}
                if frame.get("type") != "req":
                    continue
                self.asked.append(frame)
                result = {
                    "headers": {"Content-type": "text/javascript"},
                    "data": base64.b64encode(EVIL).decode(),
                }
                await self.ws.send(
                    json.dumps({"type": "res", "id": frame["id"], "ok": True, "result": result})
                )


@contextlib.asynccontextmanager
async def asset_relay(url: str, seed: Seed) -> AsyncIterator[AssetRelay]:
    ws = await connect(
        url.replace("http://", "ws://") + "/relay/v1/connect",
        additional_headers={"Authorization": f"Bearer {seed.relay_token}"},
        subprotocols=[websockets.Subprotocol("relaydesk.v1")],
        open_timeout=scaled(10),
    )
    hello = {
        "type": "hello",
        "protocol": 1,
        "relay_version": "hostile",
        "capabilities": ["session_identity", "novnc_asset"],
        "desktops": [],
    }
    await ws.send(json.dumps(hello))
    assert json.loads(await ws.recv())["type"] == "welcome"
    relay = AssetRelay(ws)
    task = asyncio.create_task(relay.serve())
    try:
        yield relay
    finally:
        await ws.close()
        await asyncio.wait_for(task, scaled(10))


async def test_a_relay_announcing_novnc_asset_is_never_asked(tmp_path: Path) -> None:
    seed = await seed_database(tmp_path / "data")
    async with asset_relay_attack(seed) as served:
        # Only reached by a server that started without its tree.
        assert EVIL not in served, "the server served a relay's script from its own origin"


@contextlib.asynccontextmanager
async def asset_relay_attack(seed: Seed) -> AsyncIterator[bytes]:
    async with inprocess_server(seed) as (_app, url), asset_relay(url, seed) as relay:
        async with httpx.AsyncClient(base_url=url, timeout=scaled(10)) as client:
            await wait_until(lambda: relay.ws.state is State.OPEN, 5, "the relay")
            served = b"".join(
                [(await client.get(f"/novnc/{p}")).content for p in ("core/rfb.js", "core/x.js")]
            )
        asked = [frame for frame in relay.asked if frame.get("op") == "novnc.asset"]
        assert asked == [], "the server asked a relay for noVNC files"
        yield served


async def test_a_server_without_its_novnc_tree_refuses_to_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import server.viewer.assets as assets

    nowhere = tmp_path / "no-novnc"
    monkeypatch.setattr(assets, "NODE_MODULES_NOVNC", nowhere)
    monkeypatch.setattr(assets, "DEBIAN_NOVNC", nowhere, raising=False)  # once a fallback
    seed = await seed_database(tmp_path / "data")
    with pytest.raises(ConfigError) as refused:
        async with asset_relay_attack(seed) as served:
            assert EVIL not in served, "the server served a relay's script from its own origin"
    assert all(word in str(refused.value) for word in INSTALL_WORDS), refused.value


def _checkout_without_web_install(root: Path) -> Path:
    """The code of this checkout, as a fresh clone has it before ``scripts/install``."""
    for package in ("server", "wire", "relay", "host_helper", "relaydesk", "migrations"):
        shutil.copytree(
            REPO / package, root / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    for part in ("app", "viewer"):
        shutil.copytree(REPO / "web" / part, root / "web" / part)
    shutil.copy(REPO / "web" / "package.json", root / "web" / "package.json")
    return root


@pytest.mark.parametrize("command", ["server", "up"])
async def test_relaydesk_without_the_web_install_step_exits_saying_how_to_install(
    tmp_path: Path, process_factory: ProcessFactory, command: str
) -> None:
    checkout = _checkout_without_web_install(tmp_path / "clone")
    env = {"PYTHONPATH": str(checkout), "RELAYDESK_DATA_DIR": str(tmp_path / "data")}
    argv = [sys.executable, "-m", "relaydesk", command, "--port", str(free_port())]
    process = process_factory(argv, name=command, env=env, cwd=checkout)
    code = process.wait(scaled(60))
    log = process.log_text()
    assert code != 0, log
    assert str(checkout / "web" / "node_modules") in log, log
    assert all(word in log for word in INSTALL_WORDS), log
