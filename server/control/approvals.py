"""A model's safety checks, decided by a person: OpenAI's ``pending_safety_checks``.

A computer-use call whose model raised safety checks runs nothing until a person of the
conversation approves them (docs/computer-use.md, "Safety checks"). The call asks for an
approval: one request per agent, desktop and set of checks, published on the conversation's
event stream (``safety_checks_pending``) and listed by ``safety_checks_list``. A person (a web
session, never an API token) approves or denies it with ``safety_checks_decide``
(``safety_checks_decided``); an approval lets the same checks through for
:data:`APPROVAL_TTL_S` after the decision, a request nobody decides lapses as long after it
was asked, and Stop revokes both on its desktop.

The requests live in the control store (``server/control/store.py``): in this process's
memory, or in Redis where several replicas serve the conversation, so that a request asked
through one replica is listed and decided through any other. A decision is kept only while
the request is still pending (one atomic step in the store): two people deciding at once on
two replicas get one decision and one ``session_conflict``.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, Literal

from server.control.store import ControlStore
from server.events.bus import EventBus
from server.events.conversations import topic_for
from wire.errors import ErrorCode, OpError

# A pending request lapses this long after it was asked, an approval this long after it was
# given.
APPROVAL_TTL_S: Final = 600.0
# Requests kept; the oldest decided ones go first.
MAX_APPROVALS: Final = 1024
PENDING_EVENT: Final = "safety_checks_pending"
DECIDED_EVENT: Final = "safety_checks_decided"
State = Literal["pending", "approved", "denied", "revoked", "expired"]
Decision = Literal["approve", "deny"]


@dataclass(frozen=True)
class Check:
    """One safety check as the model raised it."""

    id: str
    code: str | None
    message: str | None

    def item(self) -> dict[str, Any]:
        """The check as OpenAI's items carry it."""
        return {"id": self.id, "code": self.code, "message": self.message}


@dataclass(frozen=True)
class Where:
    """The desktop a request is for, as the door names it (relay name or id, kind, slot)."""

    conversation_id: str
    relay: str
    kind: str
    slot: str


@dataclass(frozen=True)
class SafetyApproval:
    """One request for a person's decision on a set of checks."""

    approval_id: str
    where: Where
    agent_id: str
    agent_name: str
    checks: tuple[Check, ...]
    call_id: str | None
    state: State
    asked_at: float
    expires_at: float
    decided_by: str | None = None

    @property
    def ids(self) -> frozenset[str]:
        return frozenset(check.id for check in self.checks)

    def encode(self) -> str:
        """The request as the control store keeps it (compact JSON)."""
        where = self.where
        data = {
            "approval_id": self.approval_id,
            "where": [where.conversation_id, where.relay, where.kind, where.slot],
            "agent_id": self.agent_id,
            "agent_name": self.agent_name,
            "checks": [[c.id, c.code, c.message] for c in self.checks],
            "call_id": self.call_id,
            "state": self.state,
            "asked_at": self.asked_at,
            "expires_at": self.expires_at,
            "decided_by": self.decided_by,
        }
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def decode(cls, raw: str) -> SafetyApproval:
        data = json.loads(raw)
        return cls(
            approval_id=data["approval_id"],
            where=Where(*data["where"]),
            agent_id=data["agent_id"],
            agent_name=data["agent_name"],
            checks=tuple(Check(*check) for check in data["checks"]),
            call_id=data["call_id"],
            state=data["state"],
            asked_at=float(data["asked_at"]),
            expires_at=float(data["expires_at"]),
            decided_by=data["decided_by"],
        )

    def info(self, messages: bool = True) -> dict[str, Any]:
        """The request as ``safety_checks_list`` shows it; without the checks' ``messages``
        (what the model saw on the desktop) on the event stream, which ``read`` members
        follow too."""
        checks = [c.item() if messages else {"id": c.id, "code": c.code} for c in self.checks]
        return {
            "approval_id": self.approval_id,
            "conversation_id": self.where.conversation_id,
            "relay": self.where.relay,
            "kind": self.where.kind,
            "slot": self.where.slot,
            "agent": self.agent_name,
            "checks": checks,
            "call_id": self.call_id,
            "state": self.state,
            "asked_at": _iso(self.asked_at),
            "expires_at": _iso(self.expires_at),
            "decided_by": self.decided_by,
        }


def _iso(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


class SafetyApprovals:
    """The requests of every replica (kept in the control store), and the events that tell
    people about them."""

    def __init__(
        self, bus: EventBus, store: ControlStore, clock: Callable[[], float] = time.time
    ) -> None:
        self._bus = bus
        self._store = store
        self._clock = clock

    async def _requests(self) -> dict[str, SafetyApproval]:
        """Every request kept, those past their time shown ``expired``; beyond
        :data:`MAX_APPROVALS`, the oldest decided ones are forgotten."""
        now = self._clock()
        requests: dict[str, SafetyApproval] = {}
        for raw in await self._store.approvals():
            request = SafetyApproval.decode(raw)
            if request.state in ("pending", "approved") and request.expires_at <= now:
                request = replace(request, state="expired")
            requests[request.approval_id] = request
        decided = sorted(
            (r for r in requests.values() if r.state != "pending"), key=lambda r: r.asked_at
        )
        gone = [r.approval_id for r in decided[: max(0, len(requests) - MAX_APPROVALS)]]
        if gone:
            await self._store.drop_approvals(gone)
            for approval_id in gone:
                del requests[approval_id]
        return requests

    async def settle(
        self,
        where: Where,
        agent_id: str,
        agent_name: str,
        checks: Sequence[Check],
        call_id: str | None,
    ) -> None:
        """Nothing when a person approved every one of ``checks`` for this agent and desktop;
        else ``OpError`` ``approval_required`` (a request is asked for, or still pending) or
        ``policy_denied`` (a person denied one)."""
        ids = frozenset(check.id for check in checks)
        found = [
            r
            for r in (await self._requests()).values()
            if r.where == where and r.agent_id == agent_id and r.ids & ids
        ]
        denied = [r for r in found if r.state == "denied"]
        if denied:
            raise _denied(denied[0])
        approved = {i for r in found if r.state == "approved" for i in r.ids}
        if ids <= approved:
            return
        pending = next((r for r in found if r.state == "pending" and ids <= r.ids), None)
        if pending is None:
            pending = await self._ask(where, agent_id, agent_name, checks, call_id)
        raise _required(pending)

    async def _ask(
        self,
        where: Where,
        agent_id: str,
        agent_name: str,
        checks: Sequence[Check],
        call_id: str | None,
    ) -> SafetyApproval:
        now = self._clock()
        request = SafetyApproval(
            approval_id=f"apv_{secrets.token_hex(8)}",
            where=where,
            agent_id=agent_id,
            agent_name=agent_name,
            checks=tuple(checks),
            call_id=call_id,
            state="pending",
            asked_at=now,
            expires_at=now + APPROVAL_TTL_S,
        )
        await self._store.put_approval(request.approval_id, request.encode(), None)
        await self._publish(PENDING_EVENT, request)
        return request

    async def decide(
        self, conversation_id: str, approval_id: str, decision: Decision, person: str
    ) -> SafetyApproval:
        """A person's decision on a pending request of ``conversation_id``."""
        request = (await self._requests()).get(approval_id)
        if request is None or request.where.conversation_id != conversation_id:
            raise OpError(
                ErrorCode.NOT_FOUND,
                "no such safety-check request in this conversation",
                {"field": "approval_id"},
            )
        now = self._clock()
        state: State = "approved" if decision == "approve" else "denied"
        expires = now + APPROVAL_TTL_S if state == "approved" else request.expires_at
        decided = replace(request, state=state, decided_by=person, expires_at=expires)
        if request.state != "pending" or not await self._store.put_approval(
            approval_id, decided.encode(), "pending"
        ):
            latest = (await self._requests()).get(approval_id, request)
            raise OpError(
                ErrorCode.SESSION_CONFLICT,
                f"this request is {latest.state} already",
                {"field": "approval_id"},
            )
        await self._publish(DECIDED_EVENT, decided)
        return decided

    async def listing(self, conversation_id: str) -> list[dict[str, Any]]:
        """The conversation's requests, newest first."""
        requests = (await self._requests()).values()
        mine = [r for r in requests if r.where.conversation_id == conversation_id]
        return [r.info() for r in sorted(mine, key=lambda r: r.asked_at, reverse=True)]

    async def revoke(
        self, relay_names: Iterable[str], kind: str, slot: str, agent_id: str | None, person: str
    ) -> int:
        """Stop on a desktop: its pending requests and approvals (of ``agent_id``, or of every
        agent) are revoked; how many."""
        names = set(relay_names)
        revoked = 0
        for request in (await self._requests()).values():
            where = request.where
            if where.relay not in names or (where.kind, where.slot) != (kind, slot):
                continue
            if agent_id is not None and request.agent_id != agent_id:
                continue
            if request.state not in ("pending", "approved"):
                continue
            done = replace(request, state="revoked", decided_by=person)
            if await self._store.put_approval(request.approval_id, done.encode(), request.state):
                await self._publish(DECIDED_EVENT, done)
                revoked += 1
        return revoked

    async def _publish(self, event: str, request: SafetyApproval) -> None:
        topic = topic_for(request.where.conversation_id)
        await self._bus.publish(topic, event, request.info(messages=False))


def _checks_text(request: SafetyApproval) -> str:
    return ", ".join(f"{c.id} ({c.code or 'no code'})" for c in request.checks)


def _required(request: SafetyApproval) -> OpError:
    return OpError(
        ErrorCode.APPROVAL_REQUIRED,
        f"the model raised safety checks {_checks_text(request)}; a person must approve them "
        f"in relaydesk (request {request.approval_id}) before this action runs. Nothing was "
        "done: send the same call again once a person approved it",
        {"approval_id": request.approval_id},
    )


def _denied(request: SafetyApproval) -> OpError:
    return OpError(
        ErrorCode.POLICY_DENIED,
        f"a person denied the safety checks {_checks_text(request)} (request "
        f"{request.approval_id}); nothing was done: do not retry this action",
        {"approval_id": request.approval_id, "reason": "safety_checks_denied"},
    )
