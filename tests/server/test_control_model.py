"""The control rules with made-up times: takeover, grants, Stop and its cooldown, the view.

Pure functions of a record and a time (``server.control.model``), so every rule is checked
exactly, without clocks or sleeps; the Redis codec round-trips every record shape.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from server.control.model import (
    Admitted,
    AgentRequest,
    ControlPolicy,
    Cooldown,
    DesktopControl,
    Refused,
    admit,
    cool_down,
    cooled_down,
    hand_back,
    next_change,
    note_person,
    place_key,
    stop_agents,
    sweep,
    take,
    view,
)
from server.control.redis import decode, encode
from wire.errors import ErrorCode

pytestmark = pytest.mark.unit

POLICY = ControlPolicy(takeover_idle_s=5, regrant_cooldown_s=30, grant_budget=3, grant_idle_s=60)
BOT = AgentRequest("u-bot", "bot")
T0 = 1_000_000.0


def admitted(record: DesktopControl, now: float, request: AgentRequest = BOT) -> DesktopControl:
    record, outcome = admit(sweep(record, now, POLICY.takeover_idle_s)[0], request, now, POLICY)
    assert isinstance(outcome, Admitted), outcome
    return record


def refused(record: DesktopControl, now: float, request: AgentRequest = BOT) -> Refused:
    _, outcome = admit(sweep(record, now, POLICY.takeover_idle_s)[0], request, now, POLICY)
    assert isinstance(outcome, Refused), outcome
    return outcome


def test_an_untouched_desktop_is_idle_and_the_first_agent_input_mints_a_grant() -> None:
    empty = DesktopControl()
    assert view(empty, T0, 5)["state"] == "idle" and empty.is_empty()
    record, outcome = admit(empty, BOT, T0, POLICY)
    assert isinstance(outcome, Admitted) and outcome.created
    assert (outcome.grant.scope, outcome.grant.actions, outcome.grant.budget) == ("desktop", 1, 3)
    assert view(record, T0, 5) == {
        "state": "agent",
        "name": "bot",
        "held": False,
        "until": None,
        "agent": "bot",
    }
    record, again = admit(record, BOT, T0 + 1, POLICY)
    assert isinstance(again, Admitted) and not again.created and again.grant.actions == 2


def test_a_persons_input_refuses_agents_until_idle_after_the_last_input() -> None:
    record = admitted(DesktopControl(), T0)
    record = note_person(record, "alice", "u-alice", T0 + 1, 5)
    assert view(record, T0 + 1, 5)["state"] == "person"
    refusal = refused(record, T0 + 1.05)
    assert refusal.code is ErrorCode.TAKEOVER_ACTIVE and not refusal.minting
    assert refusal.details["retry_after_s"] == pytest.approx(4.95)
    record = note_person(record, "alice", "u-alice", T0 + 4, 5)  # more typing moves the end
    refused(record, T0 + 8.9)
    admitted(record, T0 + 9.0)  # exactly 5 s after the last key
    assert view(record, T0 + 9.0, 5)["state"] == "agent"


def test_take_control_holds_past_the_idle_time_until_hand_back() -> None:
    record = take(DesktopControl(), "alice", "u-alice", T0)
    info = view(record, T0 + 3600, 5)
    assert (info["state"], info["held"], info["until"]) == ("person", True, None)
    held = refused(record, T0 + 3600)
    assert held.details["retry_after_s"] is None and "hands back" in held.message
    admitted(hand_back(record), T0 + 3600)


def test_input_from_the_real_screen_keeps_the_name_of_the_person_in_control() -> None:
    record = note_person(DesktopControl(), "alice", "u-alice", T0, 5)
    record = note_person(record, "someone", None, T0 + 1, 5, named=False)
    assert view(record, T0 + 5.5, 5)["name"] == "alice"  # and the lock moved to T0 + 6
    record = note_person(DesktopControl(), "someone", None, T0, 5, named=False)
    assert view(record, T0, 5)["name"] == "someone"


def test_stop_revokes_the_grant_and_refuses_a_new_one_for_the_cooldown() -> None:
    record = admitted(DesktopControl(), T0)
    record, revoked = stop_agents(record, "alice", T0 + 1, POLICY.regrant_cooldown_s)
    assert [g.agent_name for g in revoked] == ["bot"]
    assert view(record, T0 + 1, 5)["state"] == "idle"
    stopped = refused(record, T0 + 2)
    assert stopped.code is ErrorCode.STOPPED_BY_USER and stopped.minting
    assert stopped.details["retry_after_s"] == 29 and "alice stopped" in stopped.message
    refused(record, T0 + 30.9)
    record, outcome = admit(sweep(record, T0 + 31, 5)[0], BOT, T0 + 31, POLICY)
    assert isinstance(outcome, Admitted) and outcome.created
    assert record.cooldowns == {}  # swept once over


def test_stop_of_one_agent_leaves_the_others() -> None:
    other = AgentRequest("u-other", "other")
    record = admitted(admitted(DesktopControl(), T0), T0, other)
    record, revoked = stop_agents(record, "alice", T0, 30, agent_id="u-other")
    assert [g.agent_id for g in revoked] == ["u-other"]
    admitted(record, T0 + 1)
    assert refused(record, T0 + 1, other).code is ErrorCode.STOPPED_BY_USER


def test_a_stop_during_a_persons_input_is_reported_as_the_stop() -> None:
    record = admitted(DesktopControl(), T0)
    record = note_person(record, "alice", "u-alice", T0, 5)
    record, _ = stop_agents(record, "alice", T0, 30)
    assert refused(record, T0 + 1).code is ErrorCode.STOPPED_BY_USER


def test_grants_expire_when_idle_or_spent_and_a_new_one_is_minted() -> None:
    record = admitted(admitted(admitted(DesktopControl(), T0), T0 + 1), T0 + 2)  # budget 3 used
    swept, expired = sweep(record, T0 + 3, 5)
    assert [g.expiry(T0 + 3) for g in expired] == ["budget"]
    record, outcome = admit(swept, BOT, T0 + 3, POLICY)
    assert isinstance(outcome, Admitted) and outcome.created
    swept, expired = sweep(record, T0 + 3 + 60, 5)
    assert [g.expiry(T0 + 63) for g in expired] == ["idle"] and swept.grants == {}
    assert view(swept, T0 + 63, 5)["state"] == "idle"


def test_a_window_grant_refuses_input_on_another_window() -> None:
    window = AgentRequest("u-bot", "bot", "window", "0x400007")
    record = admitted(DesktopControl(), T0, window)
    admitted(record, T0 + 1, window)
    other = refused(record, T0 + 1, replace(window, window_id="0x500001"))
    assert other.code is ErrorCode.STALE_SCREEN and other.details["reason"] == "other_window"
    assert refused(record, T0 + 1, BOT).code is ErrorCode.STALE_SCREEN  # the whole desktop


def test_next_change_is_when_the_view_would_change_without_input() -> None:
    record = note_person(admitted(DesktopControl(), T0), "alice", "u-alice", T0 + 1, 5)
    assert next_change(record, T0 + 1, 5) == T0 + 6
    assert next_change(take(record, "alice", None, T0 + 2), T0 + 2, 5) == T0 + 60  # the grant
    assert next_change(DesktopControl(), T0, 5) is None


def test_the_redis_codec_round_trips_every_shape() -> None:
    record = admitted(DesktopControl(), T0, AgentRequest("u-bot", "bot", "window", "0x1"))
    record = note_person(record, "alice", "u-alice", T0 + 1, 5)
    record, _ = stop_agents(record, "alice", T0 + 2, 30, agent_id="u-x")
    record = replace(record, shown="person|alice|False|bot")
    assert decode(encode(record)) == record
    assert decode(None) == DesktopControl()


def test_a_place_keeps_the_later_cooldown_and_refuses_the_stopped_agent_only() -> None:
    place = cool_down(DesktopControl(), {"u-bot": Cooldown(T0 + 30, "alice")})
    place = cool_down(place, {"u-bot": Cooldown(T0 + 10, "carol")})
    assert place.cooldowns["u-bot"] == Cooldown(T0 + 30, "alice")
    refused = cooled_down(place, "u-bot", T0 + 29)
    assert refused is not None and refused.code is ErrorCode.STOPPED_BY_USER
    assert cooled_down(place, "u-other", T0) is None
    assert cooled_down(place, "u-bot", T0 + 30) is None
    # On a new desktop in that place the cooldown holds before a grant is minted.
    record, outcome = admit(cool_down(DesktopControl(), place.cooldowns), BOT, T0 + 1, POLICY)
    assert isinstance(outcome, Refused) and outcome.code is ErrorCode.STOPPED_BY_USER
    assert not record.grants


def test_a_place_key_is_no_desktops_key() -> None:
    key = place_key("r1", "virtual", "main")
    assert key.relay_id == "r1"
    assert "/" in key.desktop_session_id  # a session id never holds one
