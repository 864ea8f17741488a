"""A recorded agent session on a real desktop, for the recording tests (docs/recording.md).

The agent (the seeded user's API token) takes a screenshot, clicks a window that turns red
when clicked (guarded), has a click refused as stale after the window changed, then the
person takes control, hands back and presses Stop; the recording is turned off and every
segment handed to the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import av
import httpx
import numpy as np
from PIL import Image
from Xlib import X
from Xlib import display as xdisplay

from benchmarks.rfb import RFBClient
from tests.e2e.viewer_stack import Desktop, ViewerStack
from tests.support.processes import scaled
from tests.support.stack import wait_until

RELAY_ENV = {"RELAYDESK_RECORDING_SEGMENT_S": "3", "RELAYDESK_RECORDING_FPS": "4"}
WINDOW = (200, 150, 400, 300)  # x, y, width, height
GREY, RED, BLUE = 0x808080, 0xE01010, 0x1010E0
CLICK = (400, 300)


class ClickWindow:
    """An X window that turns red when clicked; :meth:`paint` colours it from the test."""

    def __init__(self, display: str) -> None:
        self.conn = xdisplay.Display(display)
        screen = self.conn.screen()
        x, y, width, height = WINDOW
        self.window = screen.root.create_window(
            x,
            y,
            width,
            height,
            0,
            screen.root_depth,
            background_pixel=GREY,
            event_mask=X.ButtonPressMask | X.ExposureMask,
            override_redirect=True,
        )
        self.window.map()
        self.conn.sync()
        self.clicks = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        while not self._stop.is_set():
            while self.conn.pending_events():
                event = self.conn.next_event()
                if event.type == X.ButtonPress:
                    self.clicks += 1
                    self._fill(RED)
            self._stop.wait(0.01)

    def _fill(self, colour: int) -> None:
        self.window.change_attributes(background_pixel=colour)
        self.window.clear_area(0, 0, WINDOW[2], WINDOW[3])
        self.conn.sync()

    def paint(self, colour: int) -> None:
        self._fill(colour)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.conn.close()


@contextlib.contextmanager
def click_window(display: str) -> Iterator[ClickWindow]:
    window = ClickWindow(display)
    try:
        yield window
    finally:
        window.close()


async def call(stack: ViewerStack, name: str, **args: Any) -> tuple[int, Any]:
    body = {"conversation_id": stack.seed.conversation_id, **args}
    headers = {"Authorization": f"Bearer {stack.seed.api_token}"}
    async with httpx.AsyncClient(base_url=stack.url, timeout=scaled(60)) as client:
        response = await client.post(f"/api/v1/actions/{name}", json=body, headers=headers)
    return response.status_code, response.json()


async def get(
    stack: ViewerStack, path: str, token: str | None = None, **headers: str
) -> httpx.Response:
    bearer = {"Authorization": f"Bearer {token or stack.seed.api_token}", **headers}
    async with httpx.AsyncClient(base_url=stack.url, timeout=scaled(60)) as client:
        return await client.get(path, headers=bearer)


def base(stack: ViewerStack, conversation_id: str | None = None) -> str:
    return f"/api/v1/conversations/{conversation_id or stack.seed.conversation_id}/recordings"


def spool(stack: ViewerStack, desktop_session_id: str) -> Path:
    return stack.seed.data_dir / "relay-state" / "recordings" / desktop_session_id


def frame_at(video: bytes, t_ms: int) -> np.ndarray:
    """The picture the video shows at ``t_ms`` (decoded here, independently of the server)."""
    with av.open(io.BytesIO(video), "r") as container:
        shown = None
        for frame in container.decode(video=0):
            if frame.time * 1000 > t_ms:
                break
            shown = frame
    assert shown is not None, f"no frame at or before {t_ms} ms"
    return shown.to_ndarray(format="rgb24")


def picture(data: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))


def colour_of(picture: np.ndarray) -> tuple[int, int, int]:
    x, y, width, height = WINDOW
    inner = picture[y + 20 : y + height - 20, x + 20 : x + width - 20]
    return tuple(int(v) for v in np.median(inner.reshape(-1, 3), axis=0))  # type: ignore[return-value]


def near(colour: tuple[int, int, int], rgb: int) -> bool:
    want = ((rgb >> 16) & 255, (rgb >> 8) & 255, rgb & 255)
    return all(abs(a - b) <= 24 for a, b in zip(colour, want, strict=True))


async def play_session(stack: ViewerStack) -> dict[str, Any]:
    """One recorded agent session, played out; what the test needs of it."""
    status, started = await call(
        stack, "desktop_start", slot="main", geometry="1280x800", record=True
    )
    assert status == 200, started
    assert started["recording"] is True and started["desktop"]["recording"] is True
    sid = started["desktop"]["desktop_session_id"]
    rows = await stack.relays.request(stack.relay_id, "desktop.status", {}, 10.0)
    display = next(d for d in rows["desktops"] if d["desktop_session_id"] == sid)["display"]
    stack.desktops.append(Desktop(sid, "main", display, 0, 0, started["viewer_url"]))
    target = {"desktop_session_id": sid}
    with click_window(display) as window:
        await asyncio.sleep(1.0)  # a second of the grey window on the video
        status, shot = await call(stack, "screen", action="screenshot", **target)
        assert status == 200, shot
        status, clicked = await call(
            stack,
            "screen",
            action="click",
            x=CLICK[0],
            y=CLICK[1],
            expected_screen_revision=shot["screen_revision"],
            **target,
        )
        assert status == 200, clicked
        await wait_until(lambda: window.clicks == 1, scaled(10), "the click to land")
        status, shot = await call(stack, "screen", action="screenshot", **target)
        await asyncio.to_thread(window.paint, BLUE)
        await asyncio.sleep(0.5)
        status, stale = await call(
            stack,
            "screen",
            action="click",
            x=CLICK[0],
            y=CLICK[1],
            expected_screen_revision=shot["screen_revision"],
            **target,
        )
        assert status == 409 and stale["error"]["code"] == "stale_screen", stale
        assert window.clicks == 1
        await stack.action("desktop_take_control", person=True, **target)
        await stack.action("desktop_hand_back", person=True, **target)
        await stack.action("agent_stop", person=True, **target)
        # A person watches for a moment (a viewer joining and leaving).
        viewer = await RFBClient.open_websocket(stack.socket_url(stack.desktops[-1]))
        await asyncio.sleep(0.5)
        await viewer.close()
        await asyncio.sleep(0.5)
        status, off = await call(stack, "desktop_record", on=False, **target)
        assert status == 200 and off["recording"] is False, off
    recording_id = started["recording_id"]
    folder = spool(stack, sid)
    await wait_until(lambda: not folder.exists(), scaled(60), "every segment handed over")
    effect = clicked.get("effect")
    return {"sid": sid, "recording_id": recording_id, "display": display, "click_effect": effect}
