"""``GET /metrics``: who may read it, and the figures after some activity.

A real server runs in-process (uvicorn on loopback). A client elsewhere is simulated through
the ASGI scope (httpx's ``ASGITransport`` with another client address), so no traffic ever
goes to a non-loopback address.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text

from server.db.engine import create_engine
from server.events.redis import RedisEventBus
from server.instruments import REGISTRY
from server.viewer.registry import ViewerRegistry
from tests.support.processes import free_port
from tests.support.sse import open_sse
from tests.support.stack import Seed, inprocess_server, seed_database
from wire.errors import OpError
from wire.ids import RelayId

pytestmark = pytest.mark.unit

TOKEN = "metrics-token-for-the-tests-0123456789"
ELSEWHERE = ("10.0.0.5", 1234)


@pytest_asyncio.fixture
async def server(tmp_path: Path) -> AsyncIterator[tuple[Any, str, Seed]]:
    seed = await seed_database(tmp_path / "data")
    async with inprocess_server(seed, metrics_token=TOKEN) as (app, base):
        yield app, base, seed


@contextlib.asynccontextmanager
async def _from(app: Any, client: tuple[str, int]) -> AsyncIterator[httpx.AsyncClient]:
    """A client of ``app`` that connects from ``client`` (the scope's address; no network)."""
    transport = httpx.ASGITransport(app=app, client=client)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
        yield http


def _samples(body: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(body)
        for sample in family.samples
    }


def _value(samples: dict[Any, float], name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


async def test_without_a_token_nobody_may_read_not_even_loopback(tmp_path: Path) -> None:
    """Any local user could otherwise read them: loopback proves nothing about who asks."""
    seed = await seed_database(tmp_path / "data")
    async with inprocess_server(seed) as (app, base):
        async with httpx.AsyncClient(base_url=base) as http:
            local = await http.get("/metrics")
            guessed = await http.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
        async with _from(app, ELSEWHERE) as http:
            elsewhere = await http.get("/metrics")
    for refused in (local, guessed, elsewhere):
        assert refused.status_code == 403
        error = refused.json()["error"]
        assert error["code"] == "forbidden"
        assert "RELAYDESK_METRICS_TOKEN" in error["message"]
        assert "relaydesk_" not in refused.text


async def test_with_a_token_every_client_needs_it(tmp_path: Path) -> None:
    seed = await seed_database(tmp_path / "data")
    async with inprocess_server(seed, metrics_token=TOKEN) as (app, base):
        async with httpx.AsyncClient(base_url=base) as http:
            bare_local = await http.get("/metrics")
        async with _from(app, ELSEWHERE) as http:
            missing = await http.get("/metrics")
            wrong = await http.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}x"})
            basic = await http.get("/metrics", headers={"Authorization": f"Basic {TOKEN}"})
            short = await http.get("/metrics", headers={"Authorization": f"Bearer {TOKEN[:-1]}"})
            right = await http.get("/metrics", headers={"Authorization": f"bearer {TOKEN}"})
    for refused in (bare_local, missing, wrong, basic, short):
        assert refused.status_code == 401
        assert refused.headers["www-authenticate"].startswith("Bearer")
        assert refused.json()["error"]["code"] == "unauthorized"
        assert TOKEN not in refused.text
    assert right.status_code == 200 and "relaydesk_viewers" in right.text


async def test_the_figures_follow_what_happens(server) -> None:
    app, base, seed = server
    parts = app.state.parts
    headers = {"Authorization": f"Bearer {seed.api_token}"}
    relay_id = RelayId(seed.relay["relay_id"])
    scrape = {"Authorization": f"Bearer {TOKEN}"}
    async with httpx.AsyncClient(base_url=base, timeout=10) as http:
        before = _samples((await http.get("/metrics", headers=scrape)).text)
        await parts.inventory.record_started(
            relay_id,
            {
                "desktop_session_id": "ds-metrics",
                "kind": "virtual",
                "slot": "main",
                "started_at": "2026-01-01T00:00:00Z",
                "display": ":1",
            },
        )
        for _ in range(3):
            listed = await http.post(
                "/api/v1/actions/desktop_list_active",
                json={"conversation_id": seed.conversation_id},
                headers=headers,
            )
            assert listed.status_code == 200
        url = f"/api/v1/events?conversation_id={seed.conversation_id}"
        async with open_sse(http, url, headers):
            during = _samples((await http.get("/metrics", headers=scrape)).text)
        after = _samples((await http.get("/metrics", headers=scrape)).text)

    assert _value(during, "relaydesk_desktops", state="running") == 1
    assert _value(during, "relaydesk_desktops", state="failed") == 0
    count = "relaydesk_action_seconds_count"
    added = _value(during, count, action="desktop_list_active") - before.get(
        (count, (("action", "desktop_list_active"),)), 0.0
    )
    assert added == 3
    assert _value(during, "relaydesk_action_seconds_sum", action="desktop_list_active") > 0
    assert _value(during, "relaydesk_sse_subscribers") == 1
    assert _value(after, "relaydesk_sse_subscribers") == 0
    assert _value(during, "relaydesk_viewers", kind="vnc") == 0
    assert _value(during, "relaydesk_viewer_bytes_total", direction="to_viewer") == 0
    assert _value(during, "relaydesk_forwarded_requests_total", kind="screen") == 0
    assert _value(during, "relaydesk_screen_revisions") == 0
    for component in ("cluster", "events", "control", "caches", "logins"):
        assert (("relaydesk_redis_errors_total", (("component", component),))) in during
    assert ("relaydesk_database_errors_total", (("kind", "disconnect"),)) in during


def _count(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def test_failed_redis_commands_are_counted() -> None:
    bus = RedisEventBus(f"redis://127.0.0.1:{free_port()}/0")  # nothing listens there
    before = _count("relaydesk_redis_errors_total", component="events")
    try:
        with pytest.raises(OpError):
            await bus.publish("topic", "event", {})
    finally:
        await bus.close()
    assert _count("relaydesk_redis_errors_total", component="events") == before + 1


async def test_failed_statements_are_counted_but_constraint_answers_are_not(
    tmp_path: Path,
) -> None:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'errors.db'}")
    other = ("relaydesk_database_errors_total", {"kind": "other"})
    try:
        async with engine.begin() as conn:
            await conn.execute(text("CREATE TABLE t (id INTEGER PRIMARY KEY)"))
            await conn.execute(text("INSERT INTO t VALUES (1)"))
        before = _count(other[0], **other[1])
        with pytest.raises(Exception, match="UNIQUE"):
            async with engine.begin() as conn:
                await conn.execute(text("INSERT INTO t VALUES (1)"))
        assert _count(other[0], **other[1]) == before
        with pytest.raises(Exception, match="no such table"):
            async with engine.begin() as conn:
                await conn.execute(text("SELECT * FROM missing"))
        assert _count(other[0], **other[1]) == before + 1
    finally:
        await engine.dispose()


class _Stream:
    def __init__(self, down: int, up: int) -> None:
        self.bytes_down, self.bytes_up = down, up
        self.target = type("Target", (), {"row": _Row()})()


class _Row:
    relay_id, desktop_session_id, kind, slot = "relay-1", "ds-1", "virtual", "main"


def test_bytes_relayed_count_open_and_ended_streams() -> None:
    registry = ViewerRegistry()
    first, second = _Stream(100, 10), _Stream(5, 1)
    registry.add(first)  # type: ignore[arg-type]
    registry.add(second)  # type: ignore[arg-type]
    first.bytes_down += 50
    assert registry.bytes_relayed() == (155, 11)
    registry.discard(first)  # type: ignore[arg-type]
    registry.discard(first)  # type: ignore[arg-type]  # a second discard counts nothing
    assert (registry.count(), registry.bytes_relayed()) == (1, (155, 11))
    registry.discard(second)  # type: ignore[arg-type]
    assert (registry.count(), registry.bytes_relayed()) == (0, (155, 11))
