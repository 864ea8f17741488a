"""``Desktop.create()``'s choices before it calls the server: which conversation, which client
(the real-process behaviour is in test_desktop.py)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from relaydesk_client import Desktop, RelaydeskClient

pytestmark = pytest.mark.unit

ROW = {"relay_id": "r1", "desktop_session_id": "s1", "kind": "virtual", "slot": "main"}


def server(conversations: list[dict[str, str]], sent: list[dict[str, Any]]) -> RelaydeskClient:
    def answer(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/v1/conversations":
            return httpx.Response(200, json={"ok": True, "conversations": conversations})
        sent.append({"path": request.url.path, **json.loads(request.content)})
        body = {"ok": True, "desktop": ROW, "viewer_url": "/vnc/s1/t/", "already_running": True}
        return httpx.Response(200, json=body)

    return RelaydeskClient("http://desk", "rdk_x", transport=httpx.MockTransport(answer))


def conversation(cid: str, title: str) -> dict[str, str]:
    return {"conversation_id": cid, "title": title, "role": "write", "created_at": "now"}


def test_several_conversations_are_named_when_none_is_chosen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("RELAYDESK_CONVERSATION_ID", raising=False)
    sent: list[dict[str, Any]] = []
    client = server([conversation("c1", "Lab"), conversation("c2", "Ops")], sent)
    with pytest.raises(ValueError, match=r"c1 \(Lab\), c2 \(Ops\)"):
        Desktop.create(client=client)
    assert sent == []  # nothing was started


def test_the_only_conversation_is_used_and_a_given_client_stays_open(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("RELAYDESK_CONVERSATION_ID", raising=False)
    sent: list[dict[str, Any]] = []
    client = server([conversation("c1", "Lab")], sent)
    with Desktop.create(client=client, profile="standard") as desktop:
        assert (desktop.conversation_id, desktop.started) == ("c1", False)
    assert sent == [
        {
            "path": "/api/v1/actions/desktop_start",
            "conversation_id": "c1",
            "slot": "main",
            "kind": "virtual",
            "profile": "standard",
        }
    ]
    assert client.conversations()  # still open: the caller's client is the caller's to close
    client.close()
