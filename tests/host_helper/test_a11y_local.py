"""The accessibility tools on the host's real screen: the host helper runs the relay's worker
in its own session, on that session's bus (a real Xvfb, a real session D-Bus, a real GTK app);
without a session bus it says so."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.host_helper.conftest import helper_config, running_helper
from tests.support.a11y_stack import FORM_APP
from tests.support.processes import ProcessTracker, scaled
from tests.support.xvfb import XvfbServer

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]


@pytest.fixture
def session_bus(tmp_path: Path) -> Iterator[str]:
    """A session D-Bus of the test's own, as a desktop session would have."""
    daemon = subprocess.Popen(
        ["dbus-daemon", "--session", "--nofork", "--print-address=1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    assert daemon.stdout is not None
    address = daemon.stdout.readline().decode().strip()
    try:
        yield address
    finally:
        daemon.terminate()
        daemon.wait(timeout=10)


async def test_the_helper_reads_its_sessions_apps(
    host_screen: XvfbServer, session_bus: str, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", session_bus)
    tracker = ProcessTracker(tmp_path)
    state = tmp_path / "form.json"
    env = {
        "DISPLAY": host_screen.display,
        "DBUS_SESSION_BUS_ADDRESS": session_bus,
        "GTK_MODULES": "gail:atk-bridge",
        "ACCESSIBILITY_ENABLED": "1",
    }
    tracker.start(["/usr/bin/python3", str(FORM_APP), str(state)], name="form", env=env)
    try:
        async with running_helper(helper_config(host_screen.display)) as helper:
            deadline = time.monotonic() + scaled(30)
            while True:
                status, body = await helper.call(
                    "POST", "/v1/local/a11y", {"call": "apps", "params": {}}
                )
                assert status == 200, body
                names = [a["name"] for a in body["apps"] if a["windows"]]
                if "a11y_app.py" in names:
                    break
                assert time.monotonic() < deadline, body
                await asyncio.sleep(0.2)
            status, found = await helper.call(
                "POST",
                "/v1/local/a11y",
                {"call": "find", "params": {"selector": 'push_button[name="Save"]'}},
            )
            assert status == 200 and found["count"] == 1, found
            status, clicked = await helper.call(
                "POST",
                "/v1/local/a11y",
                {
                    "call": "act",
                    "params": {"ref": found["matches"][0]["ref"], "action": "click"},
                },
            )
            assert status == 200 and clicked["method"] == "native", clicked
            deadline = time.monotonic() + scaled(10)
            while json.loads(state.read_text())["clicks"] != 1:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.05)
            # the relay's policy travels with the call
            status, refused = await helper.call(
                "POST",
                "/v1/local/a11y",
                {
                    "call": "observe",
                    "params": {"app": "a11y_app.py"},
                    "policy": {"RELAYDESK_A11Y_POLICY": json.dumps({"deny": ["a11y_app.py"]})},
                },
            )
            assert status == 403 and refused["error"]["code"] == "policy_denied", refused
    finally:
        tracker.cleanup()


async def test_without_a_session_bus_it_says_so(host_screen: XvfbServer, monkeypatch) -> None:
    monkeypatch.delenv("DBUS_SESSION_BUS_ADDRESS", raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", "/nonexistent")
    async with running_helper(helper_config(host_screen.display)) as helper:
        status, body = await helper.call("POST", "/v1/local/a11y", {"call": "apps", "params": {}})
    assert status == 503 and body["error"]["code"] == "a11y_unavailable", body
    assert "session bus" in body["error"]["message"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"call": "rm", "params": {}}, "call"),
        ({"call": "apps", "params": []}, "params"),
        ({"call": "apps", "params": {}, "timeout_s": 1000}, "timeout_s"),
        ({"call": "apps", "params": {}, "policy": {"PATH": "/tmp"}}, "policy"),
    ],
)
async def test_bad_calls_are_400_naming_the_field(host_screen: XvfbServer, body, field) -> None:
    async with running_helper(helper_config(host_screen.display)) as helper:
        status, answer = await helper.call("POST", "/v1/local/a11y", body)
    assert status == 400, answer
    assert answer["error"]["field"] == field
