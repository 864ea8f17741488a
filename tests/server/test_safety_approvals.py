"""A model's safety checks waiting for a person, with a made-up clock: a request is asked once,
an approval lets the same checks through until it expires, a request nobody decides lapses, a
denial stays, and Stop revokes; each change is published on the conversation's stream. Each
runs on the one-process store and on Redis (real), where two replicas share the requests: one
asks, the other lists and decides, and two people deciding at once get one decision."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
import redis.asyncio as redis

from server.control.approvals import (
    APPROVAL_TTL_S,
    DECIDED_EVENT,
    PENDING_EVENT,
    Check,
    SafetyApprovals,
    Where,
)
from server.control.memory import MemoryControlStore
from server.control.redis import APPROVALS, RedisControlStore
from server.control.store import ControlStore
from server.events.bus import create_event_bus
from server.events.conversations import topic_for
from tests.support.redis import redis_server, redis_url  # noqa: F401 (fixtures)
from wire.errors import ErrorCode, OpError

pytestmark = [pytest.mark.unit, pytest.mark.asyncio]

HERE = Where("c" * 22, "lab", "virtual", "main")
CHECKS = [Check("sc_1", "malicious_instructions", "what the model saw")]


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest_asyncio.fixture(params=["memory", "redis"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[ControlStore]:
    if request.param == "memory":
        yield MemoryControlStore()
        return
    url = request.getfixturevalue("redis_url")
    redis_store = RedisControlStore(url)
    await _forget_all(url)
    yield redis_store
    await _forget_all(url)
    await redis_store.close()


async def _forget_all(url: str) -> None:
    """No request left by another test in the session's Redis."""
    client = redis.Redis.from_url(url)
    await client.delete(APPROVALS)
    await client.aclose()


async def _refusal(approvals: SafetyApprovals, checks: list[Check] = CHECKS) -> OpError:
    with pytest.raises(OpError) as info:
        await approvals.settle(HERE, "agent-1", "bot", checks, "call_1")
    return info.value


async def test_an_approval_lets_the_checks_through_until_it_expires(store: ControlStore):
    clock = Clock()
    bus = create_event_bus("")
    feed = await bus.open_feed(topic_for(HERE.conversation_id), None)
    approvals = SafetyApprovals(bus, store, clock)
    asked = await _refusal(approvals)
    assert asked.code is ErrorCode.APPROVAL_REQUIRED
    approval_id = asked.details["approval_id"]
    assert (await _refusal(approvals)).details["approval_id"] == approval_id  # asked once
    clock.now += APPROVAL_TTL_S - 1  # decided just before the request lapses
    await approvals.decide(HERE.conversation_id, approval_id, "approve", "ada")
    clock.now += APPROVAL_TTL_S - 1
    await approvals.settle(HERE, "agent-1", "bot", CHECKS, "call_1")
    # Another agent, another desktop: not approved for them.
    with pytest.raises(OpError):
        await approvals.settle(HERE, "agent-2", "other", CHECKS, None)
    clock.now += 2
    expired = await _refusal(approvals)
    assert expired.code is ErrorCode.APPROVAL_REQUIRED
    assert expired.details["approval_id"] != approval_id
    states = {r["approval_id"]: r["state"] for r in await approvals.listing(HERE.conversation_id)}
    assert states[approval_id] == "expired"
    published = [await feed.next() for _ in range(3)]
    assert [(e.event, e.data["state"]) for e in published if e is not None] == [
        (PENDING_EVENT, "pending"),
        (DECIDED_EVENT, "approved"),
        (PENDING_EVENT, "pending"),
    ]
    assert published[0] is not None and "message" not in published[0].data["checks"][0]
    await bus.close()


async def test_a_request_nobody_decides_lapses_and_a_denial_stays(store: ControlStore):
    clock = Clock()
    approvals = SafetyApprovals(create_event_bus(""), store, clock)
    first = (await _refusal(approvals)).details["approval_id"]
    clock.now += APPROVAL_TTL_S
    with pytest.raises(OpError) as late:
        await approvals.decide(HERE.conversation_id, first, "approve", "ada")
    assert late.value.code is ErrorCode.SESSION_CONFLICT
    second = (await _refusal(approvals)).details["approval_id"]
    await approvals.decide(HERE.conversation_id, second, "deny", "ada")
    clock.now += 10 * APPROVAL_TTL_S
    assert (await _refusal(approvals)).code is ErrorCode.POLICY_DENIED
    with pytest.raises(OpError) as elsewhere:
        await approvals.decide("d" * 22, second, "approve", "ada")
    assert elsewhere.value.code is ErrorCode.NOT_FOUND


async def test_stop_revokes_the_desktops_requests_and_approvals(store: ControlStore):
    approvals = SafetyApprovals(create_event_bus(""), store, Clock())
    approval_id = (await _refusal(approvals)).details["approval_id"]
    await approvals.decide(HERE.conversation_id, approval_id, "approve", "ada")
    assert await approvals.revoke(["lab"], "virtual", "other-slot", None, "ada") == 0
    assert await approvals.revoke(["lab"], "virtual", "main", "agent-2", "ada") == 0
    assert await approvals.revoke(["relay-id", "lab"], "virtual", "main", None, "ada") == 1
    assert (await _refusal(approvals)).details["approval_id"] != approval_id


async def test_a_request_asked_through_one_replica_is_decided_through_another(redis_url: str):  # noqa: F811
    clock = Clock()
    stores = [RedisControlStore(redis_url), RedisControlStore(redis_url)]
    await _forget_all(redis_url)
    asking, deciding = (SafetyApprovals(create_event_bus(""), s, clock) for s in stores)
    try:
        approval_id = (await _refusal(asking)).details["approval_id"]
        listed = await deciding.listing(HERE.conversation_id)
        assert [(r["approval_id"], r["state"]) for r in listed] == [(approval_id, "pending")]
        assert listed[0]["checks"][0]["message"] == "what the model saw"
        await deciding.decide(HERE.conversation_id, approval_id, "approve", "ada")
        await asking.settle(HERE, "agent-1", "bot", CHECKS, "call_1")  # let through
        # Stop through the second replica revokes it for the first.
        assert await deciding.revoke(["lab"], "virtual", "main", None, "ada") == 1
        assert (await _refusal(asking)).details["approval_id"] != approval_id
        # Two people deciding the new request at once, on the two replicas: one decision.
        pending = (await _refusal(asking)).details["approval_id"]
        outcomes = await asyncio.gather(
            asking.decide(HERE.conversation_id, pending, "approve", "ada"),
            deciding.decide(HERE.conversation_id, pending, "deny", "grace"),
            return_exceptions=True,
        )
        refused = [o for o in outcomes if isinstance(o, OpError)]
        assert len(refused) == 1 and refused[0].code is ErrorCode.SESSION_CONFLICT, outcomes
        kept = {r["approval_id"]: r for r in await asking.listing(HERE.conversation_id)}
        won = next(o for o in outcomes if not isinstance(o, BaseException))
        assert kept[pending]["state"] == won.state and kept[pending]["decided_by"] == won.decided_by
    finally:
        await _forget_all(redis_url)
        for one in stores:
            await one.close()
