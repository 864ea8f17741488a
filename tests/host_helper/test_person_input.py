"""A person at the relay host's real screen (XInput2 raw events) takes control from an agent.

A private Xvfb stands in for the real screen; ``xdotool`` is another X client giving input
there, as a person's keyboard would. The helper's watch counts it, but not the agent's own
input through the helper's screen actions; through a real relay and the server, the person's
input refuses the agent's next click while the agent's own clicks never lock it out.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import httpx
import pytest

from host_helper.input_watch import Attribution, InputWatch
from tests.host_helper.conftest import TOKEN, Helper
from tests.host_helper.test_relay_local import start_helper
from tests.support.processes import ProcessFactory, free_port, scaled
from tests.support.stack import inprocess_server, seed_database, start_relay, wait_until
from tests.support.xvfb import XvfbServer
from wire.ids import RelayId

pytestmark = pytest.mark.integration


async def xdotool(display: str, *args: str) -> None:
    """Input from another X client on the display (XTEST, like a person's through x11vnc)."""
    process = await asyncio.create_subprocess_exec(
        "xdotool", *args, env={**os.environ, "DISPLAY": display}
    )
    assert await asyncio.wait_for(process.wait(), scaled(5)) == 0


async def test_another_clients_input_counts_and_the_agents_own_does_not(
    host_screen: XvfbServer,
) -> None:
    watch = InputWatch(host_screen.display, Attribution(grace_s=0.5))
    watch.start()
    try:
        await wait_until(lambda: watch.watching, 10, "the watch to start")
        await xdotool(host_screen.display, "key", "a")
        report = await watch.wait(0, scaled(5))
        assert report.seq >= 1 and report.idle_s is not None
        with watch.attribution.injecting():  # the agent's own keys
            await xdotool(host_screen.display, "key", "b", "click", "1")
        again = await watch.wait(report.seq, 1.0)
        assert again.seq == report.seq, "the agent's own input is not a person's"
        await asyncio.sleep(0.6)  # past the grace: XTEST input is a person's again
        await xdotool(host_screen.display, "key", "c")
        assert (await watch.wait(report.seq, scaled(5))).seq > report.seq
    finally:
        await watch.stop()


async def test_the_helper_answers_a_long_poll_and_skips_its_own_screen_actions(
    helper: Helper,
) -> None:
    await wait_until(lambda: _watching(helper), 10, "the helper's watch")
    status, first = await helper.call("GET", "/v1/local/input?after=0&wait=0")
    assert status == 200 and first["watching"] is True
    status, _ = await helper.call("POST", "/v1/screen/key", {"keys": "x"})
    assert status == 200
    status, after_agent = await helper.call("GET", f"/v1/local/input?after={first['seq']}&wait=1")
    assert after_agent["seq"] == first["seq"]
    poll = asyncio.create_task(helper.call("GET", f"/v1/local/input?after={first['seq']}&wait=10"))
    await asyncio.sleep(0.7)
    await xdotool(helper.display, "key", "y")
    status, answered = await asyncio.wait_for(poll, scaled(5))
    assert answered["seq"] > first["seq"] and answered["idle_ms"] < 5000


async def _watching(helper: Helper) -> bool:
    _, body = await helper.call("GET", "/v1/local/input?after=0&wait=0")
    return bool(body.get("watching"))


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("after=-1", "after"),
        ("after=1.5", "after"),
        ("after=x", "after"),
        ("wait=100", "wait"),
        ("wait=-1", "wait"),
        ("wait=nan", "wait"),
    ],
)
async def test_bad_polls_are_refused_naming_the_field(
    helper: Helper, query: str, field: str
) -> None:
    status, body = await helper.call("GET", f"/v1/local/input?{query}")
    assert (status, body["error"]["code"], body["error"]["field"]) == (400, "invalid_args", field)


async def test_a_person_at_the_real_screen_takes_over_from_the_agent(
    tmp_path: Path, process_factory: ProcessFactory, host_screen: XvfbServer
) -> None:
    seed = await seed_database(tmp_path / "data")
    helper_port = free_port()
    helper = start_helper(process_factory, host_screen.display, helper_port)
    await helper.wait_for_port_async(helper_port, 20)
    async with (
        inprocess_server(seed, takeover_idle_s=30.0) as (app, url),
        httpx.AsyncClient(base_url=url, timeout=scaled(30)) as client,
    ):
        env = {
            "RELAYDESK_HOST_HELPER": f"http://127.0.0.1:{helper_port}",
            "RELAYDESK_HOST_HELPER_TOKEN": TOKEN,
        }
        start_relay(process_factory, seed, url, env=env)
        relay_id = RelayId(seed.relay["relay_id"])
        await wait_until(lambda: app.state.parts.relays.is_connected(relay_id), 20, "the relay")

        async def act(name: str, **body: Any) -> tuple[int, Any]:
            payload = {"conversation_id": seed.conversation_id, **body}
            headers = {"Authorization": f"Bearer {seed.api_token}"}
            response = await client.post(f"/api/v1/actions/{name}", json=payload, headers=headers)
            return response.status_code, response.json()

        async def click() -> tuple[int, Any]:
            _, shot = await act("screen", action="screenshot", local=True)
            return await act(
                "screen",
                action="click",
                local=True,
                x=40,
                y=30,
                expected_screen_revision=shot["screen_revision"],
            )

        status, started = await act("desktop_start", kind="local")
        assert status == 200, started
        for _ in range(3):  # the agent's own clicks, one after the other: never a takeover
            status, clicked = await click()
            assert status == 200, clicked
        await asyncio.sleep(1.0)  # any report of them would have reached the server by now
        status, control = await act("desktop_control", kind="local")
        assert (control["control"]["state"], control["control"]["name"]) == ("agent", "alice")

        await xdotool(host_screen.display, "key", "z")  # a person at the host's keyboard
        await wait_until(lambda: _person(act), 10, "the server to see the person")
        status, refused = await click()
        assert (status, refused["error"]["code"]) == (423, "takeover_active"), refused
        assert "someone at the relay host" in refused["error"]["message"]


async def _person(act: Any) -> bool:
    _, body = await act("desktop_control", kind="local")
    return bool(body["control"]["state"] == "person")
