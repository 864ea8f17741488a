"""The warm pool end to end: a real relay process with ``RELAYDESK_POOL``, an in-process server,
the HTTP actions, a viewer through the server, ``/metrics``, ``relaydesk desktops list --pool``,
a relay killed and started again, and a relay refused for a bad pool setting."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import psutil
import pytest
import pytest_asyncio
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.rfb import RFBClient, WebSocketTransport
from server import admin
from tests.support.processes import ManagedProcess, ProcessFactory, ProcessTracker, scaled
from tests.support.stack import (
    Seed,
    inprocess_server,
    relaydesk_argv,
    seed_database,
    start_relay,
    wait_until,
)
from wire.ids import RelayId

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

METRICS_TOKEN = "metrics-token-for-the-pool-tests-0123456789"
POOL = {"RELAYDESK_POOL": "minimal=1", "DISPLAY": ""}


@dataclass
class Stack:
    url: str
    seed: Seed
    tracker: ProcessTracker
    app: Any
    relay: ManagedProcess | None = None

    async def act(self, name: str, **body: Any) -> tuple[int, dict[str, Any]]:
        payload = {"conversation_id": self.seed.conversation_id, **body}
        if name == "desktop_stop_confirm":
            payload["relay"] = "relay-1"
        headers = {"Authorization": f"Bearer {self.seed.api_token}"}
        async with httpx.AsyncClient(base_url=self.url, timeout=scaled(60)) as client:
            response = await client.post(f"/api/v1/actions/{name}", json=payload, headers=headers)
        return response.status_code, response.json()

    async def ok(self, name: str, **body: Any) -> dict[str, Any]:
        status, result = await self.act(name, **body)
        assert status == 200, result
        return result

    def start_relay(self) -> ManagedProcess:
        self.relay = start_relay(self.tracker.start, self.seed, self.url, name="relay1", env=POOL)
        return self.relay

    def connected(self) -> bool:
        return bool(self.app.state.parts.relays.is_connected(RelayId(self.seed.relay["relay_id"])))

    async def pool(self) -> dict[str, Any]:
        pools: list[dict[str, Any]] = (await self.ok("desktop_pool"))["pools"]
        [pool] = pools
        return pool

    async def ready(self) -> bool:
        return bool((await self.pool())["profiles"][0]["ready"] == 1)

    async def listed(self) -> list[str]:
        rows = (await self.ok("desktop_list_active"))["desktops"]
        return [r["desktop_session_id"] for r in rows if r["state"] in ("running", "starting")]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    root = tmp_path_factory.mktemp("pool")
    seed = await seed_database(root / "data")
    tracker = ProcessTracker(root / "processes")
    async with inprocess_server(seed, metrics_token=METRICS_TOKEN) as (app, url):
        stack = Stack(url, seed, tracker, app)
        stack.start_relay()
        try:
            await wait_until(stack.connected, scaled(20), "the relay to connect")
            await wait_until(stack.ready, scaled(30), "the pool to fill")
            yield stack
        except BaseException:
            if stack.relay is not None:
                print(stack.relay.log_tail())
            raise
        finally:
            tracker.cleanup()


async def first_frame(stack: Stack, viewer_url: str) -> tuple[int, int]:
    """A viewer through the server: the handshake, then a whole frame."""
    parts = urlsplit(viewer_url)
    path = parts.path.rstrip("/") + "/websockify"
    url = urlunsplit(("ws", parts.netloc, path, parts.query, ""))
    async with RFBClient(await WebSocketTransport.connect(url)) as client:
        await asyncio.wait_for(client.handshake(), scaled(10))
        await client.request_update(incremental=False)
        await asyncio.wait_for(client.read_update(), scaled(10))
        return client.width, client.height


async def test_a_start_takes_the_pooled_desktop_which_nobody_saw_before(stack: Stack) -> None:
    assert await stack.listed() == []  # the ready desktop is in no listing
    started = await stack.ok("desktop_start", slot="pooled", profile="minimal")
    desktop = started["desktop"]
    assert started["from_pool"] is True and desktop["state"] == "running"
    assert await first_frame(stack, started["viewer_url"]) == (1280, 800)
    assert await stack.listed() == [desktop["desktop_session_id"]]
    await wait_until(stack.ready, scaled(30), "the pool to refill")
    pool = await stack.pool()
    assert (pool["hits"], pool["misses"]) == (1, 0)
    assert pool["profiles"] == [{"profile": "minimal", "size": 1, "ready": 1, "starting": 0}]
    assert await stack.listed() == [desktop["desktop_session_id"]]  # the refill is not listed
    await stack.ok(
        "desktop_stop_confirm",
        slot="pooled",
        desktop_session_id=desktop["desktop_session_id"],
    )


async def test_an_exhausted_pool_falls_back_to_a_cold_start(stack: Stack) -> None:
    await wait_until(stack.ready, scaled(30), "the pool to fill")
    first = await stack.ok("desktop_start", slot="one", profile="minimal")
    second = await stack.ok("desktop_start", slot="two", profile="minimal")
    assert (first["from_pool"], second["from_pool"]) == (True, False)
    assert second["desktop"]["state"] == "running"
    await first_frame(stack, second["viewer_url"])
    wide = await stack.ok("desktop_start", slot="wide", profile="minimal", geometry="1600x900")
    assert wide["from_pool"] is False
    for started in (first, second, wide):
        row = started["desktop"]
        await stack.ok(
            "desktop_stop_confirm", slot=row["slot"], desktop_session_id=row["desktop_session_id"]
        )


async def test_a_fresh_reset_takes_a_pooled_desktop_and_the_pool_refills(stack: Stack) -> None:
    await wait_until(stack.ready, scaled(30), "the pool to fill")
    started = await stack.ok("desktop_start", slot="again", profile="minimal")
    old = started["desktop"]["desktop_session_id"]
    await wait_until(stack.ready, scaled(30), "the pool to refill")
    hits = (await stack.pool())["hits"]
    reset = await stack.ok("desktop_reset", desktop_session_id=old)
    new = reset["desktop"]
    assert reset["from_pool"] is True and reset["replaced_session_id"] == old
    assert (new["slot"], new["state"]) == ("again", "running")
    assert new["desktop_session_id"] != old
    assert await first_frame(stack, reset["viewer_url"]) == (1280, 800)
    status, answer = await stack.act("desktop_windows", desktop_session_id=old, relay="relay-1")
    assert (status, answer["error"]["code"]) == (409, "desktop_changed"), answer
    assert await stack.listed() == [new["desktop_session_id"]]
    await wait_until(stack.ready, scaled(30), "the pool to refill after the reset")
    assert (await stack.pool())["hits"] == hits + 1
    # A reset to another geometry's desktop is no pool's: a cold start, as before.
    wide = await stack.ok("desktop_start", slot="wide", profile="minimal", geometry="1600x900")
    cold = await stack.ok("desktop_reset", desktop_session_id=wide["desktop"]["desktop_session_id"])
    assert cold["from_pool"] is False and cold["desktop"]["geometry"] == "1600x900"
    for row in (new, cold["desktop"]):
        await stack.ok(
            "desktop_stop_confirm", slot=row["slot"], desktop_session_id=row["desktop_session_id"]
        )


async def test_metrics_and_the_cli_show_the_pool(stack: Stack, tmp_path: Path) -> None:
    await wait_until(stack.ready, scaled(30), "the pool to fill")
    headers = {"Authorization": f"Bearer {METRICS_TOKEN}"}
    async with httpx.AsyncClient(base_url=stack.url) as client:
        body = (await client.get("/metrics", headers=headers)).text
    relay = stack.seed.relay["relay_id"]
    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(body)
        for sample in family.samples
    }
    assert samples[("relaydesk_pool_size", (("profile", "minimal"), ("relay", relay)))] == 1
    ready = (("profile", "minimal"), ("relay", relay), ("state", "ready"))
    assert samples[("relaydesk_pool_desktops", ready)] == 1
    hits = samples[("relaydesk_pool_starts_total", (("outcome", "hit"), ("relay", relay)))]
    assert hits >= 1
    token = tmp_path / "api.token"
    token.write_text(stack.seed.api_token)
    cli = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "relaydesk",
        "desktops",
        "list",
        "--pool",
        "--server",
        stack.url,
        "--token-file",
        str(token),
        env={**os.environ, **stack.seed.env(), "RELAYDESK_API_TOKEN": ""},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(cli.communicate(), scaled(60))
    assert cli.returncode == 0, err.decode()
    header, row = out.decode().splitlines()
    assert header.split() == [
        "RELAY",
        "PROFILE",
        "SIZE",
        "READY",
        "STARTING",
        "GEOMETRY",
        "HITS",
        "MISSES",
    ]
    assert row.split()[:6] == ["relay-1", "minimal", "1", "1", "0", "1280x800"]


async def test_the_pool_is_for_operators_only(stack: Stack) -> None:
    store = stack.app.state.parts.store
    await admin.create_user(store, "carol")
    conversation = await admin.create_conversation(store, "Carol's", ["carol:owner"])
    await admin.share_relay(store, "relay-1", conversation["conversation_id"])
    token = (await admin.create_token(store, "carol"))["token"]
    headers = {"Authorization": f"Bearer {token}"}
    body = {"conversation_id": conversation["conversation_id"]}
    async with httpx.AsyncClient(base_url=stack.url, timeout=scaled(30)) as client:
        refused = await client.post("/api/v1/actions/desktop_pool", json=body, headers=headers)
    assert refused.status_code == 403, refused.text
    assert "operators" in refused.json()["error"]["message"]


def _desktop_pids(state_dir: Path) -> set[int]:
    """Processes of the relay's desktops: those whose environment names a display the state
    directory's X authority file serves (every desktop child has ``XAUTHORITY`` there)."""
    found = set()
    for process in psutil.process_iter():
        try:
            if str(state_dir) in process.environ().get("XAUTHORITY", ""):
                found.add(process.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


async def test_a_killed_relay_leaves_no_pooled_desktop_behind(stack: Stack) -> None:
    await wait_until(stack.ready, scaled(30), "the pool to fill")
    state_dir = Path(stack.seed.env()["RELAYDESK_STATE_DIR"])
    before = _desktop_pids(state_dir)
    assert before, "the pooled desktop's processes are not found"
    assert stack.relay is not None
    os.kill(stack.relay.pid, signal.SIGKILL)
    stack.relay.wait(scaled(10))
    await wait_until(lambda: not stack.connected(), scaled(20), "the server to see it gone")
    stack.start_relay()
    await wait_until(stack.connected, scaled(20), "the relay to reconnect")
    await wait_until(stack.ready, scaled(30), "the new relay's pool to fill")
    await wait_until(
        lambda: not (before & _desktop_pids(state_dir)), scaled(20), "the old pool to be stopped"
    )
    run_dirs = [p.name for p in (state_dir / "run").iterdir() if p.is_dir()]
    assert len(run_dirs) == 1  # the new relay's pooled desktop only
    assert await stack.listed() == []


async def test_a_bad_pool_setting_stops_the_relay_naming_it(
    process_factory: ProcessFactory, tmp_path: Path
) -> None:
    seed = await seed_database(tmp_path / "data")
    token = seed.data_dir / "relay.token"
    token.write_text(seed.relay_token)
    for raw in ("standard=-1", "nosuch=2", "lots"):
        env = {**seed.env(), "RELAYDESK_RELAY_TOKEN": "", "RELAYDESK_POOL": raw}
        argv = relaydesk_argv("relay", "--server", "http://127.0.0.1:9", "--token-file", str(token))
        relay = process_factory(argv, name=f"relay-{raw}", env=env)
        assert relay.wait(scaled(20)) == 2, relay.log_text()
        text = relay.log_text()
        assert "Traceback" not in text, text
        assert f"relaydesk relay: RELAYDESK_POOL={raw!r}:" in text, text
