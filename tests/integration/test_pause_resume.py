"""Pause and resume end to end: an in-process server, a real relay process (root, so each
desktop has a cgroup), a real desktop running an editor (mousepad) and a program that loops,
driven through the HTTP actions.

What a user would notice is read independently of the code under test: the CPU time of the
desktop's processes from ``/proc`` and the cgroup's ``cpu.stat``, the editor's unsaved text
through the desktop's clipboard after a select-all and copy, the processes and the cgroup after
a stop. The relay is killed and started again while the desktop is paused: it re-adopts it
paused.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
import pytest_asyncio

from relay.desktops.cgroups import cgroup2_mount
from tests.support.processes import ManagedProcess, ProcessTracker, scaled
from tests.support.stack import Seed, inprocess_server, seed_database, start_relay, wait_until
from wire.ids import RelayId

pytestmark = [
    pytest.mark.integration,
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.skipif(os.geteuid() != 0, reason="desktop cgroups need a root relay"),
]

TEXT = "unsaved words, kept through a pause"
# A program that uses all the CPU it is given (niced: the machine is shared).
LOOP = 'nice -n 19 sh -c "while :; do :; done"'
APPS = f"mousepad --disable-server,{LOOP}"


@dataclass
class Stack:
    url: str
    seed: Seed
    tracker: ProcessTracker
    relay: ManagedProcess
    app: Any
    session_id: str = ""

    async def act(self, name: str, **body: Any) -> tuple[int, dict[str, Any]]:
        payload = {"conversation_id": self.seed.conversation_id, **body}
        if name != "desktop_list_active":
            payload["relay"] = "relay-1"
        headers = {"Authorization": f"Bearer {self.seed.api_token}"}
        async with httpx.AsyncClient(base_url=self.url, timeout=scaled(60)) as client:
            response = await client.post(f"/api/v1/actions/{name}", json=payload, headers=headers)
        return response.status_code, response.json()

    async def ok(self, name: str, **body: Any) -> dict[str, Any]:
        status, result = await self.act(name, **body)
        assert status == 200, result
        return result

    async def say(self, text: str) -> Any:
        """A chat message in the conversation; the command's reply."""
        url = f"/api/v1/conversations/{self.seed.conversation_id}/messages"
        headers = {"Authorization": f"Bearer {self.seed.api_token}"}
        async with httpx.AsyncClient(base_url=self.url, timeout=scaled(60)) as client:
            response = await client.post(url, json={"text": text}, headers=headers)
        assert response.status_code in (200, 201), response.text
        return response.json()["reply"]

    async def state(self) -> str | None:
        listed = await self.ok("desktop_list_active")
        rows = [r for r in listed["desktops"] if r["desktop_session_id"] == self.session_id]
        return rows[0]["state"] if rows else None

    def start_relay(self) -> ManagedProcess:
        # A watchdog that probes often and fails a desktop on its first unanswered probe: a
        # paused desktop must never be one.
        env = {
            "RELAYDESK_DESKTOP_APPS": APPS,
            "DISPLAY": "",
            "RELAYDESK_WATCHDOG_INTERVAL_S": "0.5",
            "RELAYDESK_DESKTOP_PROBE_FAILURES": "1",
        }
        self.relay = start_relay(self.tracker.start, self.seed, self.url, name="relay1", env=env)
        return self.relay

    def connected(self) -> bool:
        hub = self.app.state.parts.relays
        return bool(hub.is_connected(RelayId(self.seed.relay["relay_id"])))


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    root = tmp_path_factory.mktemp("pause")
    seed = await seed_database(root / "data")
    tracker = ProcessTracker(root / "processes")
    async with inprocess_server(seed) as (app, url):
        stack = Stack(url, seed, tracker, None, app)  # type: ignore[arg-type]
        stack.start_relay()
        try:
            await wait_until(stack.connected, 20, "the relay to connect")
            started = await stack.ok("desktop_start", profile="minimal")
            stack.session_id = started["desktop"]["desktop_session_id"]
            await wait_until(lambda: _has_editor(stack), 30, "the editor's window")
            yield stack
        except BaseException:
            print(stack.relay.log_tail())
            raise
        finally:
            tracker.cleanup()


async def _editor(stack: Stack) -> int | None:
    listed = await stack.ok("desktop_windows")
    found = [w["id"] for w in listed["windows"] if "Mousepad" in w["name"]]
    return found[0] if found else None


async def _has_editor(stack: Stack) -> bool:
    return await _editor(stack) is not None


def _cgroup(session_id: str) -> Path:
    mount = cgroup2_mount()
    assert mount is not None
    (found,) = list((mount / "relaydesk").glob(f"*/{session_id}"))
    return found


def _cpu(cgroup: Path) -> tuple[int, int]:
    """The cgroup's own count (``usage_usec``) and the sum of utime+stime of its processes
    from /proc (clock ticks)."""
    usage = 0
    for line in (cgroup / "cpu.stat").read_text().splitlines():
        if line.startswith("usage_usec "):
            usage = int(line.split()[1])
    ticks = 0
    for pid in (cgroup / "cgroup.procs").read_text().split():
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return usage, ticks


async def test_pause_stops_every_process_and_reads_say_paused(stack: Stack) -> None:
    window = await _editor(stack)
    await stack.ok("desktop_window", window_id=window, op="activate")
    await stack.ok("screen", action="type", text=TEXT)
    cgroup = _cgroup(stack.session_id)
    before = _cpu(cgroup)
    await asyncio.sleep(1)
    assert _cpu(cgroup)[0] > before[0], "the looping program runs before the pause"

    paused = await stack.ok("desktop_pause", desktop_session_id=stack.session_id)
    assert paused["desktop"]["state"] == "paused"
    assert "frozen 1" in (cgroup / "cgroup.events").read_text()
    assert await stack.state() == "paused"
    frozen = _cpu(cgroup)
    await asyncio.sleep(3)  # several watchdog rounds
    assert _cpu(cgroup) == frozen, "a paused desktop used CPU"
    assert await stack.state() == "paused", "the watchdog failed a paused desktop"
    status = await stack.ok("desktop_status")
    (row,) = [r for r in status["desktops"] if r["desktop_session_id"] == stack.session_id]
    assert row["state"] == "paused"


async def test_input_and_screen_on_a_paused_desktop_answer_paused(stack: Stack) -> None:
    for body in (
        {"action": "type", "text": "more"},
        {"action": "screenshot"},
        {"action": "key", "key": "ctrl+a"},
    ):
        status, answer = await stack.act("screen", **body)
        assert (status, answer["error"]["code"]) == (409, "paused"), answer
    for name in ("desktop_windows", "desktop_clipboard_get"):
        status, answer = await stack.act(name)
        assert (status, answer["error"]["code"]) == (409, "paused"), answer


async def test_bad_pause_requests_name_what_is_wrong(stack: Stack) -> None:
    status, answer = await stack.act("desktop_pause", desktop_session_id=stack.session_id)
    assert (status, answer["error"]["code"]) == (409, "paused"), answer
    assert "already paused" in answer["error"]["message"]
    status, answer = await stack.act("desktop_pause", slot="nowhere")
    assert status == 409 and "slot" in answer["error"]["message"], answer
    status, answer = await stack.act("desktop_resume", desktop_session_id="not/an id")
    assert status == 400 and "desktop_session_id" in answer["error"]["message"], answer
    status, answer = await stack.act("desktop_pause", desktop_session_id="f" * 32)
    assert status == 409 and "desktop_session_id" in answer["error"]["message"], answer


async def test_a_restarted_relay_re_adopts_it_paused(stack: Stack) -> None:
    stack.relay.kill()
    await wait_until(lambda: not stack.connected(), 20, "the relay to go")
    stack.start_relay()
    await wait_until(stack.connected, 30, "the relay to come back")
    await wait_until(lambda: _is(stack, "paused"), 30, "the desktop to be reported paused")
    assert "frozen 1" in (_cgroup(stack.session_id) / "cgroup.events").read_text()


async def _is(stack: Stack, state: str) -> bool:
    return await stack.state() == state


async def test_resume_keeps_the_unsaved_text_and_runs_again(stack: Stack) -> None:
    cgroup = _cgroup(stack.session_id)
    resumed = await stack.ok("desktop_resume", desktop_session_id=stack.session_id)
    assert resumed["desktop"]["state"] == "running"
    assert "frozen 0" in (cgroup / "cgroup.events").read_text()
    status, answer = await stack.act("desktop_resume", desktop_session_id=stack.session_id)
    assert (status, answer["error"]["code"]) == (409, "not_paused"), answer
    before = _cpu(cgroup)
    await stack.ok("screen", action="key", key="ctrl+a")
    await stack.ok("screen", action="key", key="ctrl+c")
    await wait_until(lambda: _clipboard_is(stack, TEXT), 10, "the editor's text on the clipboard")
    assert _cpu(cgroup)[0] > before[0], "the desktop runs again"


async def _clipboard_is(stack: Stack, text: str) -> bool:
    got = await stack.ok("desktop_clipboard_get")
    return bool(got["text"] == text)


async def test_chat_pauses_and_resumes(stack: Stack) -> None:
    paused = await stack.say("/desktop pause")
    assert paused["payload"]["outcome"] == "paused", paused
    assert await stack.state() == "paused"
    again = await stack.say("/desktop pause")
    assert again["payload"]["error"]["code"] == "paused", again
    resumed = await stack.say("/desktop resume")
    assert resumed["payload"]["outcome"] == "resumed", resumed
    assert await stack.state() == "running"


async def test_stop_of_a_paused_desktop_ends_it_whole(stack: Stack) -> None:
    cgroup = _cgroup(stack.session_id)
    pids = [int(p) for p in (cgroup / "cgroup.procs").read_text().split()]
    await stack.ok("desktop_pause", desktop_session_id=stack.session_id)
    stopped = await stack.ok(
        "desktop_stop_confirm", kind="virtual", slot="main", desktop_session_id=stack.session_id
    )
    assert stopped["stopped"] is True
    assert not cgroup.exists()
    assert not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]
    assert await stack.state() is None
