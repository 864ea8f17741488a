"""Zoom, grids and normalized coordinates on the host's real screen: the same screen code as
every virtual desktop, through the helper's API and through server → relay → helper."""

from __future__ import annotations

import asyncio
import base64
import io
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from PIL import Image

from tests.host_helper.conftest import TOKEN, Helper
from tests.host_helper.test_relay_local import request, screen, start_helper
from tests.support.processes import ProcessFactory, free_port, scaled
from tests.support.stack import inprocess_server, seed_database, start_relay, wait_until
from tests.support.xrecorder import XRecorder
from tests.support.xvfb import XvfbServer
from wire.ids import RelayId

pytestmark = pytest.mark.integration

REGION = {"x": 300, "y": 200, "width": 120, "height": 90}


def pixels_of(image: str) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(base64.b64decode(image))).convert("RGB"))


def paint(recorder: XRecorder) -> None:
    for index, x in enumerate(range(0, 800, 23)):
        recorder.paint(x, 0, 11, 600, (index * 0x3B5D1F) & 0xFFFFFF)


async def test_the_helper_zooms_and_draws_grids_like_a_virtual_desktop(
    helper: Helper, recorder: XRecorder
) -> None:
    await asyncio.to_thread(paint, recorder)
    status, shot = await helper.call("POST", "/v1/screen/screenshot", {})
    assert status == 200, shot
    full = pixels_of(shot["image"])
    status, zoom = await helper.call("POST", "/v1/screen/zoom", {"region": REGION, "scale": 2})
    assert status == 200, zoom
    assert (zoom["width"], zoom["height"], zoom["display"]) == (240, 180, helper.display)
    crop = full[200:290, 300:420]
    assert np.array_equal(pixels_of(zoom["image"]), crop.repeat(2, axis=0).repeat(2, axis=1))
    assert zoom["capture"]["encoding"] == "png-bands" and "png" in zoom["capture"]

    status, drawn = await helper.call("POST", "/v1/screen/screenshot", {"grid": True})
    assert status == 200 and drawn["grid"] == {"coordinates": "pixels", "step": 100}
    assert not np.array_equal(pixels_of(drawn["image"]), full)

    outside = {"region": {"x": 700, "y": 0, "width": 200, "height": 10}}
    status, body = await helper.call("POST", "/v1/screen/zoom", outside)
    assert (status, body["error"]["code"], body["error"]["details"]["field"]) == (
        400,
        "invalid_args",
        "region",
    )


async def test_pixels_improved_on_the_real_screen_through_relay_and_server(
    tmp_path: Path, process_factory: ProcessFactory, host_screen: XvfbServer, recorder: XRecorder
) -> None:
    seed = await seed_database(tmp_path / "data")
    relay_id = RelayId(seed.relay["relay_id"])
    helper_port = free_port()
    helper = start_helper(process_factory, host_screen.display, helper_port)
    await helper.wait_for_port_async(helper_port, 20)
    async with inprocess_server(seed) as (app, url):
        helper_env = {
            "RELAYDESK_HOST_HELPER": f"http://127.0.0.1:{helper_port}",
            "RELAYDESK_HOST_HELPER_TOKEN": TOKEN,
        }
        start_relay(process_factory, seed, url, env=helper_env)
        await wait_until(lambda: app.state.parts.relays.is_connected(relay_id), 20, "the relay")
        await request(app, relay_id, "desktop.start", {"kind": "local"})
        await asyncio.to_thread(recorder.drain)
        async with httpx.AsyncClient(base_url=url, timeout=scaled(30)) as client:
            await _drive(client, seed, recorder)
    assert await asyncio.to_thread(helper.terminate, 10) == 0


async def _drive(client: httpx.AsyncClient, seed: Any, recorder: XRecorder) -> None:
    async def presses() -> list[tuple[int, int]]:
        events = await asyncio.to_thread(recorder.drain)
        return [(e["x"], e["y"]) for e in events if e["type"] == "ButtonPress"]

    status, shot = await screen(client, seed, action="screenshot")
    assert status == 200 and shot["source"] == "vision", shot
    # normalized: 500/1000 of 800 x 600 is (400, 300)
    status, body = await screen(
        client,
        seed,
        action="click",
        x=500,
        y=500,
        coordinates="normalized",
        expected_screen_revision=shot["screen_revision"],
    )
    assert status == 200, body
    assert await presses() == [(400, 300)]

    status, zoom = await screen(client, seed, action="zoom", region=REGION, scale=3)
    assert status == 200 and (zoom["width"], zoom["height"]) == (360, 270), zoom
    revision = zoom["screen_revision"]
    # zoom pixel (31, 46) shows screen pixel (310, 215)
    status, body = await screen(
        client,
        seed,
        action="click",
        x=31,
        y=46,
        coordinates="zoom",
        expected_screen_revision=revision,
    )
    assert status == 200, body
    assert await presses() == [(310, 215)]
    await asyncio.to_thread(recorder.paint, 300, 200, 40, 40, 0xFFFFFF)
    status, body = await screen(
        client, seed, action="click", x=310, y=215, expected_screen_revision=revision
    )
    assert (status, body["error"]["code"]) == (409, "stale_screen"), body
    assert await presses() == []
