"""Desktops in containers (``kind: docker``) through a real server and a real relay.

The desktop image is built once with ``scripts/docker-build desktop`` (its layers are cached
between runs); the server runs in this process, the relay as a process on this host, which a
relay running docker desktops must share with the Docker daemon (docs/docker.md). What an agent
does goes through the HTTP API and the viewer's WebSocket; Docker itself is asked only what the
isolation claims rest on (user, mounts, network, limits) and whether a container is gone.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import httpx
import numpy as np
import pytest
import pytest_asyncio
from PIL import Image

from benchmarks.bench_audio import Decoder, Heard, listener, note, peak_hz, tone
from benchmarks.rfb import RFBClient
from relay.desktops.docker.config import DockerDesktopSettings, relay_key
from tests.support.docker import (
    BUILD_TIMEOUT_S,
    REPO_ROOT,
    build_images,
    docker,
    image_size_mb,
    require_docker,
)
from tests.support.processes import ManagedProcess, ProcessTracker, scaled
from tests.support.stack import Seed, inprocess_server, seed_database, start_relay, wait_until
from wire.ids import RelayId

pytestmark = [
    pytest.mark.docker,
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.timeout(scaled(BUILD_TIMEOUT_S) + 300),
]

DESKTOP_IMAGE = "relaydesk/desktop:dev"
GEOMETRY = (1024, 768)
# Largest pointer image x11vnc paints into the framebuffer (X cursors are at most 32x32 here).
POINTER_PX = 32
# A host file the desktop must not see (written into the relay's state directory).
MARKER = "host-only-marker"
# Actions over the whole conversation, which name no relay.
CONVERSATION_WIDE = {"desktop_list_active"}


@dataclass
class Stack:
    app: Any
    url: str
    seed: Seed
    tracker: ProcessTracker
    relay: ManagedProcess
    client: httpx.AsyncClient
    build_s: float

    @property
    def relay_id(self) -> RelayId:
        return RelayId(self.seed.relay["relay_id"])

    @property
    def state_dir(self) -> Path:
        return self.seed.data_dir / "relay-state"

    async def call(self, name: str, **args: Any) -> tuple[int, Any]:
        body = {"conversation_id": self.seed.conversation_id, **args}
        if name not in CONVERSATION_WIDE:
            body.setdefault("relay", "relay-1")
        headers = {"Authorization": f"Bearer {self.seed.api_token}"}
        response = await self.client.post(f"/api/v1/actions/{name}", json=body, headers=headers)
        return response.status_code, response.json()

    async def connected(self) -> None:
        hub = self.app.state.parts.relays
        await wait_until(lambda: hub.is_connected(self.relay_id), 30, "the relay to connect")

    async def running_docker(self) -> dict[str, Any]:
        """The docker desktop in slot main: the running one, or a new one."""
        status, body = await self.call("desktop_start", kind="docker", geometry="1024x768")
        assert status == 200, body
        return dict(body)


def _containers(label: str) -> list[str]:
    out = docker("ps", "--all", "--quiet", "--no-trunc", "--filter", f"label={label}")
    return out.split()


def _container_of(session_id: str) -> dict[str, Any]:
    ids = _containers(f"relaydesk.session={session_id}")
    assert len(ids) == 1, ids
    data: list[dict[str, Any]] = json.loads(docker("inspect", ids[0]))
    return data[0]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    require_docker()
    build_s = await asyncio.to_thread(build_images, "desktop")
    root = tmp_path_factory.mktemp("docker-desktops")
    seed = await seed_database(root / "data")
    tracker = ProcessTracker(root / "processes")
    key = relay_key(seed.data_dir / "relay-state")
    try:
        async with inprocess_server(seed) as (app, url):
            relay = start_relay(tracker.start, seed, url)
            async with httpx.AsyncClient(base_url=url, timeout=scaled(60)) as client:
                stack = Stack(app, url, seed, tracker, relay, client, build_s)
                await stack.connected()
                yield stack
                for row in await app.state.parts.inventory.live_rows(stack.relay_id):
                    await stack.call(
                        "desktop_stop_confirm",
                        kind=row.kind,
                        slot=row.slot,
                        desktop_session_id=row.desktop_session_id,
                    )
            tracker.cleanup()
    finally:
        for process in tracker.processes:
            print(f"----- {process.name}: {process.log_tail(3000)}")
        for container in _containers(f"relaydesk.relay={key}"):  # only this test's relay's
            docker("rm", "--force", container, check=False)
        with contextlib.suppress(OSError):  # a relay killed before its close leaves it, empty
            DockerDesktopSettings().root(seed.data_dir / "relay-state", os.geteuid() == 0).rmdir()


def _pixels(shot: dict[str, Any]) -> np.ndarray:
    image = Image.open(io.BytesIO(base64.b64decode(shot["image"]))).convert("RGB")
    return np.asarray(image)


def _framebuffer(rects: list[Any], width: int, height: int) -> np.ndarray:
    """RGB pixels of a full Raw update (32 bpp little endian, red at bit 16: B, G, R, X)."""
    frame = np.zeros((height, width, 3), dtype=np.uint8)
    for rect in rects:
        bgrx = np.frombuffer(rect.pixels, dtype=np.uint8).reshape(rect.height, rect.width, 4)
        frame[rect.y : rect.y + rect.height, rect.x : rect.x + rect.width] = bgrx[:, :, 2::-1]
    return frame


async def _viewer_frame(stack: Stack, viewer_url: str, session_id: str) -> dict[str, Any]:
    """RFB through the server's viewer WebSocket (handshake, full updates) against the relay's
    own capture of the display: identical but for the pointer x11vnc paints for a viewer that
    takes no cursor-shape updates. x11vnc's first update to a new viewer is its copy of the
    screen as it last scanned it (it scans only while a viewer is connected), so the start-up
    apps mapped meanwhile show in a later full update on the same connection. Returns the
    screenshot that matched."""
    ws_url = stack.url.replace("http://", "ws://") + urlsplit(viewer_url).path + "websockify"
    client = await asyncio.wait_for(RFBClient.open_websocket(ws_url), scaled(20))
    try:
        assert (client.width, client.height) == GEOMETRY
        for _ in range(20):
            await client.request_update(incremental=False)
            rects = await asyncio.wait_for(client.read_update(), scaled(20))
            assert sum(r.width * r.height for r in rects) == client.width * client.height
            frame = _framebuffer(rects, client.width, client.height)
            shot = await _screenshot(stack, session_id)
            ys, xs = np.nonzero(np.any(_pixels(shot) != frame, axis=2))
            if not len(xs) or max(np.ptp(xs), np.ptp(ys)) < POINTER_PX:
                return shot
        raise AssertionError(f"{len(xs)} pixels differ between the viewer and the screenshot")
    finally:
        await client.close()


async def _screenshot(stack: Stack, session_id: str) -> dict[str, Any]:
    status, shot = await stack.call("screen", action="screenshot", desktop_session_id=session_id)
    assert status == 200, shot
    assert shot["desktop_session_id"] == session_id
    return dict(shot)


async def test_the_relay_announces_docker_desktops(stack: Stack) -> None:
    assert "docker_desktop" in stack.app.state.parts.relays.capabilities(stack.relay_id)
    size = image_size_mb(DESKTOP_IMAGE)
    print(f"\n{DESKTOP_IMAGE}: {size:.0f} MB; scripts/docker-build desktop: {stack.build_s:.1f} s")


async def test_a_docker_desktop_is_viewed_screenshotted_and_clicked(stack: Stack) -> None:
    began = time.monotonic()
    started = await stack.running_docker()
    print(f"\ndesktop_start (kind docker) answered in {time.monotonic() - began:.2f} s")
    desktop = started["desktop"]
    assert (desktop["kind"], desktop["state"]) == ("docker", "running")
    session_id = desktop["desktop_session_id"]

    shot = await _viewer_frame(stack, started["viewer_url"], session_id)
    assert (shot["width"], shot["height"]) == GEOMETRY

    x, y = GEOMETRY[0] // 2, GEOMETRY[1] - 40
    status, clicked = await stack.call(
        "screen",
        action="click",
        x=x,
        y=y,
        desktop_session_id=session_id,
        expected_screen_revision=shot["screen_revision"],
    )
    assert status == 200, clicked
    assert clicked["guard"]["checked"] is True
    status, position = await stack.call(
        "screen", action="mouse_position", desktop_session_id=session_id
    )
    assert status == 200, position
    assert (position["x"], position["y"]) == (x, y)


async def test_cuas_protocol_reaches_a_docker_desktop(stack: Stack) -> None:
    started = await stack.running_docker()
    slot = started["desktop"]["slot"]
    base = (
        f"/api/v1/conversations/{stack.seed.conversation_id}/cua/"
        f"{stack.seed.relay['name']}/docker/{slot}/cmd"
    )
    headers = {"X-API-Key": stack.seed.api_token}

    async def cmd(command: str, **params: Any) -> dict[str, Any]:
        response = await stack.client.post(
            base, headers=headers, json={"command": command, "params": params}
        )
        assert response.status_code == 200, response.text
        reply: dict[str, Any] = json.loads(response.text.strip().removeprefix("data: "))
        assert reply["success"] is True, (command, reply)
        return reply

    width, height = GEOMETRY
    assert (await cmd("get_screen_size"))["size"] == {"width": width, "height": height}
    shot = await cmd("screenshot")
    assert Image.open(io.BytesIO(base64.b64decode(shot["image_data"]))).size == GEOMETRY
    await cmd("left_click", x=30, y=40)  # guarded by that screenshot
    assert (await cmd("get_cursor_position"))["position"] == {"x": 30, "y": 40}


async def test_a_docker_desktop_cannot_see_the_hosts_files(stack: Stack) -> None:
    session_id = (await stack.running_docker())["desktop"]["desktop_session_id"]
    marker = stack.state_dir / MARKER
    marker.write_text("only on the host\n")
    info = _container_of(session_id)
    host = info["HostConfig"]
    mounts = {(m["Source"], m["Destination"]) for m in info["Mounts"]}
    run_dir = next(source for source, target in mounts if source == target)
    assert mounts == {(run_dir, run_dir), (f"{run_dir}/x11", "/tmp/.X11-unix")}
    user = info["Config"]["User"].split(":")[0]
    assert user and user != "0" and user != "root"
    assert host["NetworkMode"] == "none" and host["ReadonlyRootfs"] is True
    assert host["NanoCpus"] > 0 and host["Memory"] > 0 and host["CapDrop"] == ["ALL"]
    assert not host.get("PortBindings") and not info["NetworkSettings"].get("Ports")

    container = info["Id"]
    for path in (marker, stack.state_dir, REPO_ROOT, Path("/var/run/docker.sock")):
        assert path.exists()
        listing = docker("exec", container, "ls", "-d", str(path), check=False)
        assert listing == "", f"{path} is visible in the container"
    # Of the host directory that holds the desktops' directories, only its own is there.
    parent = Path(run_dir).parent
    assert docker("exec", container, "ls", "-a", str(parent)).split() == [
        ".",
        "..",
        Path(run_dir).name,
    ]
    interfaces = docker("exec", container, "cat", "/proc/net/dev").splitlines()[2:]
    assert [line.split(":")[0].strip() for line in interfaces] == ["lo"]
    uids = docker("exec", container, "sh", "-c", "cat /proc/[0-9]*/status | grep ^Uid")
    assert {line.split()[1] for line in uids.splitlines()} == {user}


async def test_a_tone_played_in_the_desktop_is_heard_through_the_server(stack: Stack) -> None:
    started = await stack.running_docker()
    desktop = started["desktop"]
    url = stack.url.replace("http://", "ws://") + urlsplit(started["viewer_url"]).path + "audio"
    decoder, heard, pcm = Decoder(), Heard(), []
    async with listener(url) as ws:
        first = await asyncio.wait_for(ws.receive(), scaled(10))
        assert first.type == aiohttp.WSMsgType.BINARY, (ws.close_code, first.extra)
        began = time.monotonic()
        with tone(desktop["display"], 20):
            while True:
                message = await asyncio.wait_for(ws.receive(), scaled(5))
                assert message.type == aiohttp.WSMsgType.BINARY, (ws.close_code, message.extra)
                pcm.append(decoder.decode(note(heard, message.data)))
                if len(pcm) >= 10 and abs(peak_hz(np.concatenate(pcm[-10:])) - 440) < 10:
                    break
                assert time.monotonic() - began < scaled(2.0), "no 440 Hz peak within 2 s"


async def test_the_accessibility_bus_is_read_through_the_desktops_directory(
    stack: Stack,
) -> None:
    session_id = (await stack.running_docker())["desktop"]["desktop_session_id"]
    status, found = await stack.call(
        "desktop_find", selector="frame", desktop_session_id=session_id
    )
    # xterm and openbox expose no accessibility tree: an empty answer, not a11y_unavailable.
    assert status == 200, found


async def test_a_restarted_relay_re_adopts_the_container(stack: Stack) -> None:
    started = await stack.running_docker()
    session_id = started["desktop"]["desktop_session_id"]
    container = _container_of(session_id)["Id"]
    stack.relay.send_signal(signal.SIGKILL)
    stack.relay.wait(10)
    hub = stack.app.state.parts.relays
    await wait_until(lambda: not hub.is_connected(stack.relay_id), 20, "the relay to go")
    stack.relay = start_relay(stack.tracker.start, stack.seed, stack.url, name="relay-again")
    await stack.connected()

    status, listed = await stack.call("desktop_list_active", probe=True)
    assert status == 200, listed
    rows = [r for r in listed["desktops"] if r["desktop_session_id"] == session_id]
    assert [(r["kind"], r["state"]) for r in rows] == [("docker", "running")]
    assert _container_of(session_id)["Id"] == container
    status, attached = await stack.call("desktop_attach", kind="docker")
    assert status == 200, attached
    await _viewer_frame(stack, attached["viewer_url"], session_id)


async def test_stop_removes_the_container(stack: Stack) -> None:
    desktop = (await stack.running_docker())["desktop"]
    session_id, display = desktop["desktop_session_id"], desktop["display"]
    container = _container_of(session_id)["Id"]
    run_dir = next(
        m["Source"] for m in _container_of(session_id)["Mounts"] if m["Source"] == m["Destination"]
    )
    status, body = await stack.call(
        "desktop_stop_confirm", kind="docker", desktop_session_id=session_id
    )
    assert status == 200, body
    assert _containers(f"relaydesk.session={session_id}") == []
    assert docker("inspect", container, check=False) in ("", "[]")
    number = display.removeprefix(":")
    assert not Path(f"/tmp/.X{number}-lock").exists()
    assert not Path(f"/tmp/.X11-unix/X{number}").is_symlink()
    assert not Path(run_dir).exists()
    status, listed = await stack.call("desktop_list_active", probe=True)
    assert session_id not in [r["desktop_session_id"] for r in listed["desktops"]]


async def test_bench_docker_desktops_quick_run() -> None:
    result = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "benchmarks.bench_docker_desktops", "--quick"],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=scaled(300),
        check=False,
    )
    output = f"--- stdout\n{result.stdout}\n--- stderr\n{result.stderr[-4000:]}"
    assert result.returncode == 0, output
    assert "docker / virtual start p50" in result.stdout, output
    print(result.stdout)
