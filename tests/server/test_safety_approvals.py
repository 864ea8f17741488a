"""A model's safety checks waiting for a person, with a made-up clock: a request is asked once,
an approval lets the same checks through until it expires, a request nobody decides lapses, a
denial stays, and Stop revokes; each change is published on the conversation's stream."""

from __future__ import annotations

import pytest

from server.control.approvals import (
    APPROVAL_TTL_S,
    DECIDED_EVENT,
    PENDING_EVENT,
    Check,
    SafetyApprovals,
    Where,
)
from server.events.bus import create_event_bus
from server.events.conversations import topic_for
from wire.errors import ErrorCode, OpError

pytestmark = [pytest.mark.unit, pytest.mark.asyncio]

HERE = Where("c" * 22, "lab", "virtual", "main")
CHECKS = [Check("sc_1", "malicious_instructions", "what the model saw")]


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


async def _refusal(approvals: SafetyApprovals, checks: list[Check] = CHECKS) -> OpError:
    with pytest.raises(OpError) as info:
        await approvals.settle(HERE, "agent-1", "bot", checks, "call_1")
    return info.value


async def test_an_approval_lets_the_checks_through_until_it_expires():
    clock = Clock()
    bus = create_event_bus("")
    feed = await bus.open_feed(topic_for(HERE.conversation_id), None)
    approvals = SafetyApprovals(bus, clock)
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
    states = {r["approval_id"]: r["state"] for r in approvals.listing(HERE.conversation_id)}
    assert states[approval_id] == "expired"
    published = [await feed.next() for _ in range(3)]
    assert [(e.event, e.data["state"]) for e in published if e is not None] == [
        (PENDING_EVENT, "pending"),
        (DECIDED_EVENT, "approved"),
        (PENDING_EVENT, "pending"),
    ]
    assert published[0] is not None and "message" not in published[0].data["checks"][0]
    await bus.close()


async def test_a_request_nobody_decides_lapses_and_a_denial_stays():
    clock = Clock()
    approvals = SafetyApprovals(create_event_bus(""), clock)
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


async def test_stop_revokes_the_desktops_requests_and_approvals():
    approvals = SafetyApprovals(create_event_bus(""), Clock())
    approval_id = (await _refusal(approvals)).details["approval_id"]
    await approvals.decide(HERE.conversation_id, approval_id, "approve", "ada")
    assert await approvals.revoke(["lab"], "virtual", "other-slot", None, "ada") == 0
    assert await approvals.revoke(["lab"], "virtual", "main", "agent-2", "ada") == 0
    assert await approvals.revoke(["relay-id", "lab"], "virtual", "main", None, "ada") == 1
    assert (await _refusal(approvals)).details["approval_id"] != approval_id
