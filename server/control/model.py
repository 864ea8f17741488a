"""Who is in control of a desktop: the records and the pure rules over them.

Every rule takes the desktop's :class:`DesktopControl` and the time (``now``, seconds since the
epoch) and returns the new record plus what happened; nothing here reads a clock or does I/O,
so the whole policy is tested with made-up times and shared unchanged by the in-process and
the Redis store (``server.control.store``). The behaviour is described in ``docs/control.md``.

- A **person** who gave input (through a relaydesk viewer, or on the relay host's real screen)
  holds the desktop until ``takeover_idle_s`` after that input; "Take control" holds it until
  "Hand back".
- An **agent**'s first input on a desktop mints a :class:`Grant` (scope ``desktop`` or
  ``window``) with an action budget and an idle expiry; later inputs run under it.
- **Stop** revokes the agents' grants and refuses a new one for ``regrant_cooldown_s``, on
  the desktop and in its place (:func:`place_key`): a desktop stopped and started again in the
  same slot does not end the cooldown.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Literal, NamedTuple

from server.db.rows import ControlInfo
from wire.errors import ErrorCode

GrantScope = Literal["desktop", "window"]
GRANT_SCOPES: tuple[GrantScope, ...] = ("desktop", "window")


class DesktopKey(NamedTuple):
    """One desktop incarnation: a relay's claim, so always keyed by the relay too (a tuple:
    made for every listed row)."""

    relay_id: str
    desktop_session_id: str

    def text(self) -> str:
        return f"{self.relay_id}:{self.desktop_session_id}"


def place_key(relay_id: str, kind: str, slot: str) -> DesktopKey:
    """The record of a place where agents act — a relay's ``(kind, slot)``, whichever desktop
    runs there — which keeps Stop's cooldowns beyond the desktop's life. (A session id never
    holds a ``/``, so no desktop's record shares this key.)"""
    return DesktopKey(relay_id, f"place/{kind}/{slot}")


@dataclass(frozen=True)
class ControlPolicy:
    """The timings and limits of control (``RELAYDESK_TAKEOVER_IDLE_S`` and friends)."""

    takeover_idle_s: float = 5.0
    regrant_cooldown_s: float = 30.0
    grant_budget: int = 1000
    grant_idle_s: float = 120.0


@dataclass(frozen=True)
class Person:
    """The person whose input holds the desktop (``held``: by "Take control")."""

    name: str
    user_id: str | None
    last_input_at: float
    held: bool = False


@dataclass(frozen=True)
class Grant:
    """An agent's permission to give input on one desktop (or one window of it)."""

    grant_id: str
    agent_id: str
    agent_name: str
    scope: GrantScope
    window_id: str | None
    created_at: float
    last_action_at: float
    actions: int
    budget: int
    idle_s: float

    def expiry(self, now: float) -> str | None:
        """Why the grant no longer holds at ``now`` (``idle`` or ``budget``), or None."""
        if self.actions >= self.budget:
            return "budget"
        if now >= self.last_action_at + self.idle_s:
            return "idle"
        return None


@dataclass(frozen=True)
class Cooldown:
    """A stopped agent may not get a new grant on this desktop before ``until``."""

    until: float
    by: str


@dataclass(frozen=True)
class DesktopControl:
    """Everything control knows of one desktop; empty means ``idle``."""

    person: Person | None = None
    grants: dict[str, Grant] = field(default_factory=dict)
    cooldowns: dict[str, Cooldown] = field(default_factory=dict)
    # The last state published for this desktop (``signature``): whoever changes the record
    # publishes a change exactly once, whichever server replica it runs on.
    shown: str = "idle"

    def is_empty(self) -> bool:
        return (
            self.person is None and not self.grants and not self.cooldowns and self.shown == "idle"
        )


IDLE: ControlInfo = {"state": "idle", "name": None, "held": False, "until": None, "agent": None}


def signature(info: ControlInfo) -> str:
    """What a published change is about (not ``until``, which moves with every input)."""
    if info["state"] == "idle":
        return "idle"
    return "|".join((info["state"], info["name"] or "", str(info["held"]), info["agent"] or ""))


@dataclass(frozen=True)
class AgentRequest:
    """An agent's input about to happen: who, and on what part of the desktop."""

    agent_id: str
    agent_name: str
    scope: GrantScope = "desktop"
    window_id: str | None = None


@dataclass(frozen=True)
class Admitted:
    """The input may run under ``grant``; ``created`` when it was minted now."""

    grant: Grant
    created: bool


@dataclass(frozen=True)
class Refused:
    """The input must not happen: the error code, why, and what the agent may do."""

    code: ErrorCode
    message: str
    details: dict[str, object]
    minting: bool  # True when a grant was refused (the agent held none)


Admission = Admitted | Refused


def iso(moment: float | None) -> str | None:
    return None if moment is None else datetime.fromtimestamp(moment, UTC).isoformat()


# -- reading ---------------------------------------------------------------------------------


def active_person(record: DesktopControl, now: float, idle_s: float) -> Person | None:
    """The person who holds the desktop at ``now``, if any."""
    person = record.person
    if person is None or not (person.held or now < person.last_input_at + idle_s):
        return None
    return person


def live_grants(record: DesktopControl, now: float) -> list[Grant]:
    """Grants still valid at ``now``, the most recently used first."""
    grants = [g for g in record.grants.values() if g.expiry(now) is None]
    return sorted(grants, key=lambda g: g.last_action_at, reverse=True)


def view(record: DesktopControl, now: float, idle_s: float) -> ControlInfo:
    """``idle``, ``agent`` (with its name) or ``person`` (with the person's name)."""
    grants = live_grants(record, now)
    agent = grants[0].agent_name if grants else None
    person = active_person(record, now, idle_s)
    if person is not None:
        until = None if person.held else iso(person.last_input_at + idle_s)
        return {
            "state": "person",
            "name": person.name,
            "held": person.held,
            "until": until,
            "agent": agent,
        }
    if agent is not None:
        return {"state": "agent", "name": agent, "held": False, "until": None, "agent": agent}
    return IDLE.copy()


def next_change(record: DesktopControl, now: float, idle_s: float) -> float | None:
    """When the view of ``record`` changes next without new input (a lock lapsing, a grant
    expiring, a cooldown ending), or None."""
    moments: list[float] = []
    person = record.person
    if person is not None and not person.held and now < person.last_input_at + idle_s:
        moments.append(person.last_input_at + idle_s)
    moments += [g.last_action_at + g.idle_s for g in record.grants.values() if not g.expiry(now)]
    moments += [c.until for c in record.cooldowns.values() if c.until > now]
    return min(moments) if moments else None


# -- a person -------------------------------------------------------------------------------


def note_person(
    record: DesktopControl,
    name: str,
    user_id: str | None,
    at: float,
    idle_s: float,
    *,
    named: bool = True,
) -> DesktopControl:
    """A person's input at ``at``. Input that cannot say who gave it (``named=False``: the
    real screen) keeps the name of a person who is in control already."""
    current = active_person(record, at, idle_s)
    if current is not None and (not named or current.user_id == user_id):
        person = replace(current, last_input_at=max(at, current.last_input_at))
    else:
        held = current is not None and current.held
        person = Person(name, user_id, at, held)
    return replace(record, person=person)


def take(record: DesktopControl, name: str, user_id: str | None, now: float) -> DesktopControl:
    """ "Take control": the person holds the desktop until they hand it back."""
    return replace(record, person=Person(name, user_id, now, held=True))


def hand_back(record: DesktopControl) -> DesktopControl:
    """ "Hand back": no person holds the desktop any more (new input would take it again)."""
    return replace(record, person=None)


# -- agents ----------------------------------------------------------------------------------


def stop_agents(
    record: DesktopControl, by: str, now: float, cooldown_s: float, agent_id: str | None = None
) -> tuple[DesktopControl, list[Grant]]:
    """Revoke the grants (of ``agent_id``, or of every agent) and start their cooldowns."""
    revoked = [g for g in record.grants.values() if agent_id in (None, g.agent_id)]
    stopped = {g.agent_id for g in revoked} | ({agent_id} if agent_id else set())
    grants = {k: g for k, g in record.grants.items() if k not in stopped}
    cooldowns = {**record.cooldowns, **{a: Cooldown(now + cooldown_s, by) for a in stopped}}
    return replace(record, grants=grants, cooldowns=cooldowns), revoked


def cool_down(record: DesktopControl, cooldowns: dict[str, Cooldown]) -> DesktopControl:
    """``record`` with ``cooldowns`` added; of two for one agent the later one holds."""
    merged = dict(record.cooldowns)
    for agent_id, cooldown in cooldowns.items():
        held = merged.get(agent_id)
        if held is None or held.until < cooldown.until:
            merged[agent_id] = cooldown
    return replace(record, cooldowns=merged)


def sweep(record: DesktopControl, now: float, idle_s: float) -> tuple[DesktopControl, list[Grant]]:
    """Drop what no longer holds at ``now``: expired grants (returned), a lapsed person,
    ended cooldowns."""
    expired = [g for g in record.grants.values() if g.expiry(now) is not None]
    grants = {k: g for k, g in record.grants.items() if g.expiry(now) is None}
    person = active_person(record, now, idle_s)
    cooldowns = {k: c for k, c in record.cooldowns.items() if c.until > now}
    return DesktopControl(person, grants, cooldowns, record.shown), expired


def admit(
    record: DesktopControl, request: AgentRequest, now: float, policy: ControlPolicy
) -> tuple[DesktopControl, Admission]:
    """May the agent's input run now? Stop first, then a person, then the grant's scope.

    ``record`` is swept first (:func:`sweep`): an expired grant is gone, and a new one is
    minted in its place.
    """
    held = record.grants.get(request.agent_id)
    usable = held if held is not None and held.expiry(now) is None else None
    refusal = _refusal(record, request, now, policy, usable)
    if refusal is not None:
        return record, refusal
    if usable is None:
        grant = _mint(request, now, policy)
    else:
        grant = replace(usable, last_action_at=now, actions=usable.actions + 1)
    grants = {**record.grants, request.agent_id: grant}
    return replace(record, grants=grants), Admitted(grant, usable is None)


def _mint(request: AgentRequest, now: float, policy: ControlPolicy) -> Grant:
    window = request.window_id if request.scope == "window" else None
    return Grant(
        grant_id=secrets.token_hex(8),
        agent_id=request.agent_id,
        agent_name=request.agent_name,
        scope=request.scope,
        window_id=window,
        created_at=now,
        last_action_at=now,
        actions=1,
        budget=policy.grant_budget,
        idle_s=policy.grant_idle_s,
    )


def _refusal(
    record: DesktopControl,
    request: AgentRequest,
    now: float,
    policy: ControlPolicy,
    usable: Grant | None,
) -> Refused | None:
    stopped = cooled_down(record, request.agent_id, now)
    if stopped is not None:
        return stopped
    person = active_person(record, now, policy.takeover_idle_s)
    if person is not None:
        return _takeover(person, now, policy.takeover_idle_s, minting=usable is None)
    if usable is not None and usable.scope == "window" and request.window_id != usable.window_id:
        return Refused(
            ErrorCode.STALE_SCREEN,
            f"this agent's grant covers window {usable.window_id} only; the input names "
            f"{request.window_id or 'the whole desktop'}",
            {
                "reason": "other_window",
                "suggestion": "act on the granted window, or wait until "
                "the grant expires and act again",
            },
            minting=False,
        )
    return None


def cooled_down(record: DesktopControl, agent_id: str, now: float) -> Refused | None:
    """``stopped_by_user`` while a Stop's cooldown of ``agent_id`` in ``record`` runs."""
    cooldown = record.cooldowns.get(agent_id)
    if cooldown is not None and now < cooldown.until:
        return _stopped(cooldown, now)
    return None


def _stopped(cooldown: Cooldown, now: float) -> Refused:
    wait = round(cooldown.until - now, 1)
    return Refused(
        ErrorCode.STOPPED_BY_USER,
        f"{cooldown.by} stopped this agent on this desktop; no new input for {wait:g} s",
        {
            "reason": "stopped_by_user",
            "retry_after_s": wait,
            "suggestion": "end this run and tell the person; a new run may act after the cooldown",
        },
        minting=True,
    )


def _takeover(person: Person, now: float, idle_s: float, *, minting: bool) -> Refused:
    if person.held:
        wait, when = None, f"until {person.name} hands back control"
    else:
        wait = round(person.last_input_at + idle_s - now, 2)
        when = f"until {idle_s:g} s after their last input"
    return Refused(
        ErrorCode.TAKEOVER_ACTIVE,
        f"{person.name} is using this desktop; agent input is refused {when}",
        {
            "reason": "person_in_control",
            "retry_after_s": wait,
            "suggestion": "wait and take a new screenshot before acting; reads keep working",
        },
        minting=minting,
    )
