"""Screen revisions across replicas: a call on another replica's revision runs there.

Two screen tools stand for two replicas sharing one secret key and one (scripted) relay; the
forwarding between them is a direct call where ``server.cluster.screen`` would send signed
HTTP (``tests/cluster/test_replicas.py`` runs the real thing).
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from server.instruments import REGISTRY
from server.screen.revisions import RevisionStore, View, verify
from server.screen.tool import Caller, IssuerGone, ScreenTool
from tests.server.test_screen_tool import CALLER, HEIGHT, WIDTH, FakeAudit, FakeRelay
from wire.errors import ErrorCode, OpError
from wire.guard import CropRect

pytestmark = pytest.mark.unit

KEY = "shared-secret-key"


class Replicas:
    """The ``RevisionIssuers`` of each tool: the others, by replica id; a missing one is gone."""

    def __init__(self, own: str) -> None:
        self.replica_id = own
        self.tools: dict[str, ScreenTool] = {}
        self.sent: list[tuple[str, dict[str, Any]]] = []

    async def run(
        self, issuer: str, caller: Caller, body: dict[str, Any], timeout_s: float
    ) -> dict[str, Any]:
        self.sent.append((issuer, body))
        tool = self.tools.get(issuer)
        if tool is None:
            raise IssuerGone(f"replica {issuer} is not alive")
        return await tool.run(caller, json.loads(json.dumps(body)), forwarded=True)


def _replica(name: str, relay: FakeRelay) -> tuple[ScreenTool, Replicas, FakeAudit]:
    issuers, audit = Replicas(name), FakeAudit()
    tool = ScreenTool(relay, RevisionStore(KEY, issuer=name), audit, issuers)
    return tool, issuers, audit


@pytest.fixture
def relay() -> FakeRelay:
    return FakeRelay()


@pytest.fixture
def cluster(relay: FakeRelay) -> dict[str, tuple[ScreenTool, Replicas, FakeAudit]]:
    replicas = {name: _replica(name, relay) for name in ("a", "b")}
    for _, issuers, _ in replicas.values():
        issuers.tools = {name: tool for name, (tool, _, _) in replicas.items()}
    return replicas


def _click(revision: str, **extra: Any) -> dict[str, Any]:
    return {"action": "click", "x": 100, "y": 50, "expected_screen_revision": revision, **extra}


def _observed(action: str) -> float:
    """How many calls of ``action`` the screen tool timed in this process."""
    labels = {"action": action}
    return REGISTRY.get_sample_value("relaydesk_screen_action_seconds_count", labels) or 0.0


async def test_a_guarded_click_on_another_replicas_screenshot_runs_there(cluster, relay):
    (a, _, a_audit), (b, b_peers, b_audit) = cluster["a"], cluster["b"]
    shot = await a.run(CALLER, {"action": "screenshot"})
    assert verify(KEY, shot["screen_revision"]).issuer == "a"
    clicks_before = _observed("click")
    result = await b.run(CALLER, _click(shot["screen_revision"]))
    assert result["ok_from_relay"] == "screen.click" and result["source"] == "vision"
    assert [issuer for issuer, _ in b_peers.sent] == ["a"]
    op, args = relay.requests[-1]
    assert op == "screen.click" and args["guard"]["rect"] == {
        "x": 36,
        "y": 2,
        "width": 128,
        "height": 96,
    }
    # audited once, by the replica that ran it; timed once, where it came in
    assert [row["op"] for row in a_audit.rows] == ["screen.screenshot", "screen.click"]
    assert a_audit.rows[-1]["outcome"] == "ok" and b_audit.rows == []
    assert _observed("click") == clicks_before + 1


async def test_a_zoom_revision_is_read_where_it_was_issued(cluster, relay):
    (a, _, _), (b, b_peers, _) = cluster["a"], cluster["b"]
    shot = await a.run(CALLER, {"action": "screenshot"})
    kept = a.revisions.lookup(shot["screen_revision"], "relay-1", None)
    view = View((WIDTH, HEIGHT), CropRect(100, 50, 40, 40), (80, 80), zoom=True)
    zoom = a.revisions.keep(kept.revision.binding, kept.capture, view)
    body = {
        "action": "move",
        "coordinates": "zoom",
        "x": 40,
        "y": 20,
        "expected_screen_revision": zoom,
    }
    await b.run(CALLER, body)
    assert b_peers.sent[-1][0] == "a"
    op, args = relay.requests[-1]
    assert (op, args["x"], args["y"]) == ("screen.move", 120, 60)


async def test_a_stale_screen_at_the_issuer_reaches_the_caller_with_its_figures(cluster, relay):
    (a, _, a_audit), (b, _, b_audit) = cluster["a"], cluster["b"]
    shot = await a.run(CALLER, {"action": "screenshot"})
    relay.error = OpError(ErrorCode.STALE_SCREEN, "stale", {"difference": 0.4, "threshold": 0.06})
    with pytest.raises(OpError) as info:
        await b.run(CALLER, _click(shot["screen_revision"]))
    assert info.value.code is ErrorCode.STALE_SCREEN
    assert info.value.details["difference"] == 0.4
    assert "take a new screenshot" in info.value.message
    assert a_audit.rows[-1]["reason"] == "stale_screen" and b_audit.rows == []


async def test_a_gone_issuer_is_an_expired_revision_and_sends_nothing(cluster, relay):
    (a, _, _), (b, b_peers, b_audit) = cluster["a"], cluster["b"]
    shot = await a.run(CALLER, {"action": "screenshot"})
    del b_peers.tools["a"]
    sent = len(relay.requests)
    with pytest.raises(OpError) as info:
        await b.run(CALLER, _click(shot["screen_revision"]))
    assert info.value.code is ErrorCode.REVISION_EXPIRED
    assert info.value.details == {"reason": "replica_gone"}
    assert "take a new one" in info.value.message
    assert len(relay.requests) == sent
    assert (b_audit.rows[-1]["op"], b_audit.rows[-1]["reason"]) == (
        "screen.click",
        "revision_expired",
    )


async def test_calls_that_need_no_other_capture_stay_here(cluster, relay):
    (a, _, _), (b, b_peers, b_audit) = cluster["a"], cluster["b"]
    theirs = (await a.run(CALLER, {"action": "screenshot"}))["screen_revision"]
    ours = (await b.run(CALLER, {"action": "screenshot"}))["screen_revision"]
    await b.run(CALLER, _click(ours))
    # an unguarded action in pixels does not read its revision
    await b.run(CALLER, {"action": "move", "x": 3, "y": 4, "expected_screen_revision": theirs})
    assert b_peers.sent == []
    assert [row["op"] for row in b_audit.rows][-2:] == ["screen.click", "screen.move"]


async def test_a_forged_revision_is_refused_here(cluster):
    (a, _, _), (b, b_peers, _) = cluster["a"], cluster["b"]
    token = (await a.run(CALLER, {"action": "screenshot"}))["screen_revision"]
    prefix, payload, mac = token.split(".")
    data = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    data["o"] = "elsewhere"
    forged = base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()
    with pytest.raises(OpError) as info:
        await b.run(CALLER, _click(f"{prefix}.{forged}.{mac}"))
    assert info.value.code is ErrorCode.REVISION_MISMATCH
    assert b_peers.sent == []


async def test_a_forwarded_call_is_never_forwarded_again(cluster, relay):
    (a, _, _), (b, b_peers, _) = cluster["a"], cluster["b"]
    theirs = (await b.run(CALLER, {"action": "screenshot"}))["screen_revision"]
    with pytest.raises(OpError) as info:
        await a.run(CALLER, _click(theirs), forwarded=True)
    assert info.value.code is ErrorCode.REVISION_EXPIRED
    assert b_peers.sent == [] and cluster["a"][1].sent == []


async def test_one_machine_issues_revisions_without_a_replica(relay):
    tool = ScreenTool(relay, RevisionStore(KEY), FakeAudit())
    token = (await tool.run(CALLER, {"action": "screenshot"}))["screen_revision"]
    payload = token.split(".")[1]
    data = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    assert set(data) == {"i", "r", "s", "d", "t"}
    assert verify(KEY, token).issuer == ""
    assert tool.revisions.issued_elsewhere(token) is None
