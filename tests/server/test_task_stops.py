"""A background task stops when it is told to, even when the cancellation lands as a Redis
command returns (Python 3.11's ``wait_for`` race, which redis-py's socket timeout meets on
every command): a loop that checks after each step stops at the first cancel, a replica's
router stops every time, nothing waits for ever (real Redis). A loop that never pauses and
never checks can swallow cancel after cancel under load, which is why the server's loops
check (``stop_if_cancelled``) as well as being cancelled again (``cancel_and_wait``)."""

from __future__ import annotations

import asyncio
import contextlib
import random
import secrets
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
import pytest_asyncio
import redis.asyncio as redis

from server.cluster.ownership import PREFIX, Ownership
from server.cluster.peers import Peers
from server.cluster.router import ClusterRouter
from server.cluster.signing import ClusterSigner
from server.relays.hub import RelayHub
from server.tasks import cancel_and_wait, stop_if_cancelled
from tests.support.redis import redis_server, redis_url  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.unit, pytest.mark.redis]

TRIES = 60
HANG_S = 5.0  # a hang, not a speed: a stop takes milliseconds


@pytest_asyncio.fixture
async def client(redis_url: str) -> AsyncIterator[redis.Redis]:  # noqa: F811
    # The server's own settings: a socket timeout, so every command goes through wait_for.
    connection = redis.Redis.from_url(redis_url, socket_timeout=5.0)
    await connection.set("task-stops", "1")
    yield connection
    await connection.aclose()


async def _cancel_at_random(loop: Any, stop: Any) -> int:
    """Start ``loop`` up to ``TRIES`` times and stop it at a random moment with ``stop``; the
    try whose stop never ended it, or ``-1``."""
    for attempt in range(TRIES):
        task = asyncio.create_task(loop())
        await asyncio.sleep(random.random() * 0.003)
        try:
            async with asyncio.timeout(HANG_S):
                await stop(task)
        except TimeoutError:
            await cancel_and_wait(task)
            return attempt
    return -1


async def _plain_stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def test_a_loop_that_checks_after_each_step_stops_at_the_first_cancel(
    client: redis.Redis,
) -> None:
    async def polling() -> None:
        while True:
            await client.get("task-stops")
            stop_if_cancelled()

    assert await _cancel_at_random(polling, _plain_stop) == -1


async def test_a_replicas_router_stops_whenever_it_is_stopped(client: redis.Redis) -> None:
    for _ in range(TRIES // 2):
        signer = ClusterSigner(secrets.token_urlsafe(24))
        replica = "stopping-" + secrets.token_hex(3)
        router = ClusterRouter(
            RelayHub(cast(Any, None)),
            Ownership(client, replica, "http://127.0.0.1:9", 1.0),
            Peers(signer, replica, max_text=1 << 20, max_frame=1 << 20),
            heartbeat_s=0.002,
            on_orphaned=lambda _relay: asyncio.sleep(0),
            signer=signer,
        )
        await router.beat()
        router.start()
        await asyncio.sleep(random.random() * 0.02)
        stopping = asyncio.create_task(router.stop())
        done, _ = await asyncio.wait([stopping], timeout=HANG_S)
        if not done:
            await cancel_and_wait(stopping, *router._tasks)
        assert done, "the router's stop never ended"
        # Stopped for good: its heartbeat does not come back after it left.
        await asyncio.sleep(0.01)
        assert not await client.exists(PREFIX + "replica:" + replica)
