"""Snapshots, forks and reset end to end: an in-process server, a real relay process (root), a
real desktop running an editor (mousepad, with a file of its home) and a terminal launched by
``desktop_launch``, driven through the HTTP actions.

What a user would notice is read independently of the code under test: each desktop's editor
text through its clipboard after a select-all and copy, the files in each desktop's home on
disk, the windows' geometry as the desktop's window list shows it.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from relay.desktops.user import ROOT_HOMES_DIR
from server import admin
from server.db.store import Store
from tests.support.processes import ManagedProcess, ProcessTracker, scaled
from tests.support.stack import Seed, inprocess_server, seed_database, start_relay, wait_until
from wire.ids import RelayId

pytestmark = [
    pytest.mark.integration,
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.skipif(os.geteuid() != 0, reason="a root relay runs desktops as their own user"),
]

TEXT = "typed before the snapshot"
NOTES = "notes.txt"
# The editor opens a file of its home (its working directory) when the desktop starts.
APPS = f"mousepad --disable-server {NOTES}"
FORKS = 4
TERMINAL_AT = (200, 150)


@dataclass
class Stack:
    url: str
    seed: Seed
    tracker: ProcessTracker
    app: Any
    homes: Path
    other_conversation: str = ""
    relay: ManagedProcess | None = None
    main: str = ""
    forks: dict[str, str] = field(default_factory=dict)  # slot → session id

    async def act(
        self, name: str, /, conversation: str | None = None, **body: Any
    ) -> tuple[int, dict[str, Any]]:
        payload = {"conversation_id": conversation or self.seed.conversation_id, **body}
        if name not in ("desktop_list_active", "desktop_snapshots", "desktop_snapshot_delete"):
            payload.setdefault("relay", "relay-1")
        headers = {"Authorization": f"Bearer {self.seed.api_token}"}
        async with httpx.AsyncClient(base_url=self.url, timeout=scaled(120)) as client:
            response = await client.post(f"/api/v1/actions/{name}", json=payload, headers=headers)
        return response.status_code, response.json()

    async def ok(self, name: str, /, **body: Any) -> dict[str, Any]:
        status, result = await self.act(name, **body)
        assert status == 200, result
        return result

    async def say(self, text: str) -> Any:
        url = f"/api/v1/conversations/{self.seed.conversation_id}/messages"
        headers = {"Authorization": f"Bearer {self.seed.api_token}"}
        async with httpx.AsyncClient(base_url=self.url, timeout=scaled(120)) as client:
            response = await client.post(url, json={"text": text}, headers=headers)
        assert response.status_code in (200, 201), response.text
        return response.json()["reply"]

    def connected(self) -> bool:
        hub = self.app.state.parts.relays
        return bool(hub.is_connected(RelayId(self.seed.relay["relay_id"])))

    def home(self, session_id: str) -> Path:
        return self.homes / "sessions" / session_id


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    root = tmp_path_factory.mktemp("snapshots")
    seed = await seed_database(root / "data")
    store = await Store.open(seed.database_url)
    try:
        other = await admin.create_conversation(store, "Other", ["alice:owner"])
        await admin.share_relay(store, seed.relay["relay_id"], other["conversation_id"])
    finally:
        await store.close()
    tracker = ProcessTracker(root / "processes")
    # Where the root relay keeps its desktops' homes (relay/desktops/user.py: homes_root).
    key = hashlib.sha256(str((seed.data_dir / "relay-state").resolve()).encode()).hexdigest()
    homes = ROOT_HOMES_DIR / key[:12]
    env = {"RELAYDESK_DESKTOP_APPS": APPS, "DISPLAY": "", "RELAYDESK_MAX_DESKTOPS": "6"}
    async with inprocess_server(seed) as (app, url):
        stack = Stack(url, seed, tracker, app, homes, other["conversation_id"])
        stack.relay = start_relay(tracker.start, seed, url, name="relay1", env=env)
        try:
            await wait_until(stack.connected, 20, "the relay to connect")
            started = await stack.ok("desktop_start", profile="minimal")
            stack.main = started["desktop"]["desktop_session_id"]
            await wait_until(lambda: _window(stack, stack.main, "Mousepad"), 30, "the editor")
            yield stack
        except BaseException:
            print(stack.relay.log_tail())
            raise
        finally:
            await _stop_all(stack)
            tracker.cleanup()


async def _stop_all(stack: Stack) -> None:
    listed = await stack.ok("desktop_list_active")
    for row in listed["desktops"]:
        await stack.act(
            "desktop_stop_confirm",
            kind=row["kind"],
            slot=row["slot"],
            desktop_session_id=row["desktop_session_id"],
        )


async def _window(stack: Stack, session_id: str, name: str) -> dict[str, Any] | None:
    status, listed = await stack.act("desktop_windows", desktop_session_id=session_id)
    if status != 200:
        return None
    found = [w for w in listed["windows"] if name in w["name"] or w["app"] == name]
    return found[0] if found else None


async def _editor_text(stack: Stack, session_id: str) -> str:
    """What the desktop's editor shows: select all, copy, read the desktop's clipboard."""
    editor = await _window(stack, session_id, "Mousepad")
    assert editor is not None
    sid = {"desktop_session_id": session_id}
    await stack.ok("desktop_window", window_id=editor["id"], op="activate", **sid)
    await stack.ok("screen", action="key", key="ctrl+a", **sid)
    await stack.ok("screen", action="key", key="ctrl+c", **sid)
    await asyncio.sleep(0.3)
    got = await stack.ok("desktop_clipboard_get", **sid)
    return str(got["text"])


async def _type_and_save(stack: Stack, session_id: str, text: str) -> None:
    editor = await _window(stack, session_id, "Mousepad")
    assert editor is not None
    sid = {"desktop_session_id": session_id}
    await stack.ok("desktop_window", window_id=editor["id"], op="activate", **sid)
    await stack.ok("screen", action="key", key="ctrl+End", **sid)
    await stack.ok("screen", action="type", text=text, **sid)
    await stack.ok("screen", action="key", key="ctrl+s", **sid)


def _file_is(path: Path, text: str) -> bool:
    try:
        return path.read_text().rstrip("\n") == text
    except FileNotFoundError:
        return False


async def test_snapshot_of_a_desktop_with_its_editor_file_and_a_launched_terminal(
    stack: Stack,
) -> None:
    await _type_and_save(stack, stack.main, TEXT)
    notes = stack.home(stack.main) / NOTES
    await wait_until(lambda: _file_is(notes, TEXT), 15, "the editor to save the file")
    await stack.ok("desktop_launch", desktop_session_id=stack.main, app="xterm", wait_s=0)
    await wait_until(lambda: _window(stack, stack.main, "xterm"), 20, "the terminal")
    terminal = await _window(stack, stack.main, "xterm")
    assert terminal is not None
    x, y = TERMINAL_AT
    await stack.ok(
        "desktop_window",
        desktop_session_id=stack.main,
        window_id=terminal["id"],
        op="move",
        x=x,
        y=y,
    )

    saved = await stack.ok("desktop_snapshot", desktop_session_id=stack.main, name="base")
    snap = saved["snapshot"]
    assert (snap["name"], snap["profile"], snap["apps"]) == ("base", "minimal", ["xterm"])
    assert {"app": "xterm", "x": x, "y": y} in [
        {k: w[k] for k in ("app", "x", "y")} for w in snap["windows"]
    ]
    listed = await stack.ok("desktop_snapshots")
    assert [s["name"] for s in listed["snapshots"]] == ["base"]


async def test_four_forks_show_the_text_and_differ_after_their_own_edits(stack: Stack) -> None:
    started = await stack.ok("desktop_start", snapshot="base", count=FORKS)
    assert started["failed"] == []
    stack.forks = {
        d["desktop"]["slot"]: d["desktop"]["desktop_session_id"] for d in started["desktops"]
    }
    assert sorted(stack.forks) == [f"base-{i}" for i in range(1, FORKS + 1)]
    assert all(d["viewer_url"] for d in started["desktops"])
    for session_id in stack.forks.values():
        await wait_until(lambda s=session_id: _window(stack, s, "Mousepad"), 30, "a fork's editor")
        assert await _editor_text(stack, session_id) == TEXT
    for slot, session_id in stack.forks.items():
        await _type_and_save(stack, session_id, f" {slot}")
    for slot, session_id in stack.forks.items():
        notes = stack.home(session_id) / NOTES
        await wait_until(lambda n=notes, s=slot: _file_is(n, f"{TEXT} {s}"), 15, "a fork's save")
    assert _file_is(stack.home(stack.main) / NOTES, TEXT), "a fork's edit reached the original"


async def test_forks_relaunch_the_terminal_into_its_place(stack: Stack) -> None:
    async def placed(session_id: str) -> bool:
        terminal = await _window(stack, session_id, "xterm")
        return terminal is not None and (terminal["x"], terminal["y"]) == TERMINAL_AT

    for session_id in stack.forks.values():
        await wait_until(lambda s=session_id: placed(s), 30, "a fork's terminal in its place")


async def test_a_fork_asked_to_record_is_recorded(stack: Stack) -> None:
    started = await stack.ok("desktop_start", snapshot="base", slots=["recorded"], record=True)
    (fork,) = started["desktops"]
    assert fork["recording"] is True and fork["desktop"]["recording"] is True
    assert fork["recording_id"]
    listed = await stack.ok("desktop_list_active")
    session_id = fork["desktop"]["desktop_session_id"]
    row = next(r for r in listed["desktops"] if r["desktop_session_id"] == session_id)
    assert row["recording"] is True
    await stack.ok(
        "desktop_stop_confirm", kind="virtual", slot="recorded", desktop_session_id=session_id
    )
    # Stopped while recording: the recording ends with the desktop, its video handed over
    # (nothing left in the relay's spool, nothing grabbing the display number it freed).
    spool = stack.seed.data_dir / "relay-state" / "recordings" / session_id
    await wait_until(lambda: not spool.exists(), scaled(30), "the recording handed over")
    url = f"/api/v1/conversations/{stack.seed.conversation_id}/recordings"
    headers = {"Authorization": f"Bearer {stack.seed.api_token}"}
    async with httpx.AsyncClient(base_url=stack.url, timeout=scaled(30)) as client:
        listed_recordings = (await client.get(url, headers=headers)).json()["recordings"]
    (recording,) = [r for r in listed_recordings if r["recording_id"] == fork["recording_id"]]
    assert recording["recording"] is False and recording["segments"] >= 1, recording


async def test_another_conversation_can_neither_see_nor_start_the_snapshot(stack: Stack) -> None:
    other = stack.other_conversation
    status, listed = await stack.act("desktop_snapshots", conversation=other)
    assert (status, listed["snapshots"]) == (200, [])
    for name, body in (
        ("desktop_start", {"snapshot": "base", "count": 1}),
        ("desktop_snapshot_delete", {"name": "base"}),
        ("desktop_reset", {"desktop_session_id": stack.main, "snapshot": "base"}),
    ):
        status, answer = await stack.act(name, conversation=other, **body)
        assert status == 404, (name, answer)
        assert answer["error"]["code"] == "not_found"
        assert "base" in answer["error"]["message"]


async def test_bad_fork_and_snapshot_requests_name_the_field(stack: Stack) -> None:
    cases: list[tuple[str, dict[str, Any], int, str]] = [
        ("desktop_start", {"snapshot": "nothing-here", "count": 1}, 404, "snapshot"),
        ("desktop_start", {"snapshot": "base", "count": 0}, 400, "count"),
        ("desktop_start", {"snapshot": "base", "count": 6}, 409, "count"),
        ("desktop_start", {"snapshot": "../base", "count": 1}, 400, "snapshot"),
        ("desktop_start", {"count": 2}, 400, "count"),
        ("desktop_snapshot", {"desktop_session_id": stack.main, "name": "a/b"}, 400, "name"),
        ("desktop_snapshot", {"desktop_session_id": stack.main, "name": ".."}, 400, "name"),
        ("desktop_snapshot", {"desktop_session_id": stack.main, "name": "base"}, 400, "name"),
        ("desktop_snapshot_delete", {"name": "../../etc"}, 400, "name"),
        ("desktop_reset", {"desktop_session_id": stack.main, "snapshot": "x/y"}, 400, "snapshot"),
    ]
    for name, body, want, field_name in cases:
        status, answer = await stack.act(name, **body)
        assert status == want, (name, body, answer)
        assert field_name in answer["error"]["message"], (name, body, answer)


async def test_reset_restores_a_deleted_file_under_a_new_session(stack: Stack) -> None:
    slot, old = next(iter(stack.forks.items()))
    (stack.home(old) / NOTES).unlink()
    reset = await stack.ok("desktop_reset", desktop_session_id=old, snapshot="base")
    new = reset["desktop"]["desktop_session_id"]
    assert (reset["desktop"]["slot"], reset["replaced_session_id"]) == (slot, old)
    assert new != old
    assert _file_is(stack.home(new) / NOTES, TEXT)
    await wait_until(lambda: _window(stack, new, "Mousepad"), 30, "the reset desktop's editor")
    assert await _editor_text(stack, new) == TEXT
    status, answer = await stack.act("desktop_windows", desktop_session_id=old)
    assert (status, answer["error"]["code"]) == (409, "desktop_changed"), answer
    assert answer["error"]["current_session_id"] == new
    stack.forks[slot] = new

    fresh = await stack.ok("desktop_reset", desktop_session_id=new)
    renewed = fresh["desktop"]["desktop_session_id"]
    assert not (stack.home(renewed) / NOTES).exists(), "a reset without snapshot starts fresh"
    stack.forks[slot] = renewed


async def test_chat_saves_and_resets_the_main_desktop(stack: Stack) -> None:
    saved = await stack.say("/desktop snapshot from-chat")
    assert saved["payload"]["outcome"] == "saved", saved
    assert saved["payload"]["snapshot"]["name"] == "from-chat"
    again = await stack.say("/desktop snapshot from-chat")
    assert again["payload"]["error"]["code"] == "invalid_args", again
    (stack.home(stack.main) / NOTES).unlink()
    reset = await stack.say("/desktop reset from-chat")
    assert reset["payload"]["outcome"] == "reset", reset
    new = reset["payload"]["desktop"]["desktop_session_id"]
    assert new != stack.main
    assert _file_is(stack.home(new) / NOTES, TEXT)
    stack.main = new
    await stack.ok("desktop_snapshot_delete", name="from-chat")


async def test_delete_removes_the_snapshot(stack: Stack) -> None:
    deleted = await stack.ok("desktop_snapshot_delete", name="base")
    assert (deleted["deleted"], deleted["files_deleted"]) == (True, True)
    assert (await stack.ok("desktop_snapshots"))["snapshots"] == []
    status, answer = await stack.act("desktop_start", snapshot="base", count=1)
    assert status == 404 and "snapshot" in answer["error"]["message"], answer
