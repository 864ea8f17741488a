"""Two root relays on one host: a program in one relay's desktop cannot reach the other relay's
desktops (docs/desktops.md, "Desktop user").

An in-process server and two real relay processes with default settings, a real desktop on
each. The attacker is a program running as relay B's desktop user with B's session
environment, as anything started from B's terminal would; what it tries is what the attack
run did: read the environment of relay A's desktop processes, A's X cookie, A's display, A's
sound server, and signal A's processes. A third relay naming A's account is refused.
"""

from __future__ import annotations

import asyncio
import json
import os
import pwd
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
import pytest_asyncio

from tests.support.processes import ProcessTracker, scaled
from tests.support.stack import add_relay, inprocess_server, seed_database, start_relay, wait_until
from wire.ids import RelayId

pytestmark = [
    pytest.mark.integration,
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.skipif(os.geteuid() != 0, reason="desktop users belong to root relays"),
]


@dataclass
class Desk:
    """One relay and its desktop."""

    relay: str
    relay_id: str
    state_dir: Path
    session_id: str = ""
    display: str = ""

    def record(self) -> dict[str, Any]:
        data = json.loads((self.state_dir / "desktops.json").read_text(encoding="utf-8"))
        (desktop,) = [d for d in data["desktops"] if d["desktop_session_id"] == self.session_id]
        found: dict[str, Any] = desktop
        return found

    def user(self) -> pwd.struct_passwd:
        return pwd.getpwuid(os.stat(self.record()["home"]).st_uid)

    def session_pids(self) -> list[int]:
        """The desktop's processes that run as its user (the session: D-Bus, apps, sound)."""
        uid = self.user().pw_uid
        return [p.pid for p in psutil.process_iter(["uids"]) if p.info["uids"].real == uid]

    def run_as(self, script: str, env: dict[str, str] | None = None) -> str:
        """``sh -c script`` as this desktop's user, with its session's environment."""
        user = self.user()
        record = self.record()
        done = subprocess.run(
            ["/bin/sh", "-c", script],
            env=record["session_env"] | (env or {}),
            cwd=record["home"],
            user=user.pw_uid,
            group=user.pw_gid,
            extra_groups=[],
            capture_output=True,
            timeout=scaled(20),
            check=False,
        )
        return done.stdout.decode(errors="replace")


@dataclass
class Stack:
    url: str
    tracker: ProcessTracker
    seed: Any
    alice: Desk
    bob: Desk
    bob_relay: Any


# Relay B's desktop starts a program that leaves the desktop's sessions, as one started with
# setsid from its terminal would.
SURVIVOR = f"setsid sleep {600 + os.getpid() % 1000 / 1000:.3f}"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    root = tmp_path_factory.mktemp("isolation")
    seed = await seed_database(root / "data")
    second = await add_relay(seed, "relay-b")
    tracker = ProcessTracker(root / "processes")
    alice = Desk("relay-1", seed.relay["relay_id"], root / "data" / "relay-state")
    bob = Desk("relay-b", second["relay_id"], root / "data" / "relay-b-state")
    async with inprocess_server(seed) as (app, url):
        relays = [
            start_relay(
                tracker.start,
                seed,
                url,
                name="relay-a",
                env={"DISPLAY": ""},
                extra_args=("--stop-desktops-on-exit",),
            ),
            start_relay(
                tracker.start,
                seed,
                url,
                second["token"],
                name="relay-b",
                env={
                    "DISPLAY": "",
                    "RELAYDESK_STATE_DIR": str(bob.state_dir),
                    "RELAYDESK_DESKTOP_APPS": SURVIVOR,
                    "RELAYDESK_DESKTOP_ALLOWED_APPS": SURVIVOR,
                },
                extra_args=("--stop-desktops-on-exit",),
            ),
        ]
        try:
            hub = app.state.parts.relays
            await wait_until(
                lambda: all(hub.is_connected(RelayId(d.relay_id)) for d in (alice, bob)),
                20,
                "both relays to connect",
            )
            for desk in (alice, bob):
                started = await _act(
                    url,
                    seed,
                    "desktop_start",
                    relay=desk.relay,
                    geometry="1024x768",
                    profile="minimal",
                )
                desk.session_id = started["desktop"]["desktop_session_id"]
                desk.display = started["desktop"]["display"]
            yield Stack(url, tracker, seed, alice, bob, relays[1])
        except BaseException:
            for relay in relays:
                print(relay.log_tail())
            raise
        finally:
            tracker.cleanup()


async def _act(url: str, seed: Any, name: str, **body: Any) -> dict[str, Any]:
    payload = {"conversation_id": seed.conversation_id, **body}
    headers = {"Authorization": f"Bearer {seed.api_token}"}
    async with httpx.AsyncClient(base_url=url, timeout=scaled(60)) as client:
        response = await client.post(f"/api/v1/actions/{name}", json=payload, headers=headers)
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


async def test_two_relays_run_their_desktops_as_different_accounts(stack: Stack) -> None:
    alice, bob = stack.alice.user(), stack.bob.user()
    assert 0 not in (alice.pw_uid, bob.pw_uid)
    assert alice.pw_uid != bob.pw_uid, "two relays share a desktop user"
    assert stack.alice.session_pids() and stack.bob.session_pids()


async def test_the_other_relays_desktop_cannot_read_these_desktops_environment(
    stack: Stack,
) -> None:
    pids = " ".join(map(str, stack.alice.session_pids()))
    assert pids
    read = stack.bob.run_as(
        f'for p in {pids}; do tr "\\0" "\\n" < /proc/$p/environ 2>/dev/null; done'
    )
    assert "XAUTHORITY=" not in read and "DISPLAY=" not in read, read[:500]


async def test_the_other_relays_desktop_cannot_use_these_desktops_display(stack: Stack) -> None:
    record = stack.alice.record()
    cookie = record["session_env"]["XAUTHORITY"]
    got = stack.bob.run_as(f"cat {cookie} >/dev/null 2>&1 && echo read")
    assert got == "", "relay B's desktop read relay A's X cookie"
    shown = stack.bob.run_as(
        f"xdpyinfo -display {stack.alice.display} >/dev/null 2>&1 && echo shown",
        env={"XAUTHORITY": cookie},
    )
    assert shown == "", "relay B's desktop opened relay A's display"
    # The same program reaches its own desktop's display: the refusal above is the boundary.
    own = stack.bob.run_as(f"xdpyinfo -display {stack.bob.display} >/dev/null && echo shown")
    assert own.strip() == "shown"


async def test_the_other_relays_desktop_cannot_signal_or_reach_these_desktops_home(
    stack: Stack,
) -> None:
    pids = " ".join(map(str, stack.alice.session_pids()))
    signalled = stack.bob.run_as(f"for p in {pids}; do kill -0 $p 2>/dev/null && echo $p; done")
    assert signalled == "", f"relay B's desktop may signal (and so trace) {signalled.split()}"
    home = stack.alice.record()["home"]
    listed = stack.bob.run_as(f"ls -a {home} 2>/dev/null")
    assert listed == "", listed


async def test_the_other_relays_desktop_cannot_reach_these_desktops_sound(stack: Stack) -> None:
    server = stack.alice.record()["session_env"].get("PULSE_SERVER")
    assert server is not None, "relay A's desktop has no sound (PulseAudio is not running)"
    own = stack.alice.run_as(f"pactl --server={server} info >/dev/null 2>&1 && echo reached")
    assert own.strip() == "reached"
    reached = stack.bob.run_as(f"pactl --server={server} info >/dev/null 2>&1 && echo reached")
    assert reached == "", "relay B's desktop reached relay A's sound server"


async def test_a_relay_naming_another_relays_desktop_user_refuses_to_start(
    stack: Stack,
) -> None:
    name = stack.alice.user().pw_name
    third = await add_relay(stack.seed, "relay-c")
    state_dir = stack.seed.data_dir / "relay-c-state"
    relay = start_relay(
        stack.tracker.start,
        stack.seed,
        stack.url,
        third["token"],
        name="relay-c",
        env={"DISPLAY": "", "RELAYDESK_DESKTOP_USER": name, "RELAYDESK_STATE_DIR": str(state_dir)},
    )
    await wait_until(lambda: not relay.is_alive(), 30, "the third relay to refuse to start")
    await asyncio.sleep(0)
    assert relay.returncode == 2, relay.log_tail()
    assert name in relay.log_text() and "another relay" in relay.log_text()


def _survivors() -> list[psutil.Process]:
    words = SURVIVOR.split()[1:]
    return [
        p
        for p in psutil.process_iter(["cmdline", "status"])
        if p.info["cmdline"] == words and p.info["status"] != psutil.STATUS_ZOMBIE
    ]


async def test_nothing_of_a_relays_desktop_user_outlives_the_relay(stack: Stack) -> None:
    # Last: it stops relay B.
    uid = stack.bob.user().pw_uid
    await wait_until(_survivors, 10, "relay B's setsid program to run")
    assert all(p.uids().real == uid for p in _survivors())
    stack.bob_relay.terminate(timeout=scaled(30))
    left = [
        p
        for p in psutil.process_iter(["uids", "status"])
        if p.info["uids"].real == uid and p.info["status"] != psutil.STATUS_ZOMBIE
    ]
    for proc in left:
        proc.kill()
    assert not left, f"processes of relay B's desktop user outlived it: {left}"
