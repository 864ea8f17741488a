"""The screen service on a relay with denied apps (``relay/policy.py``,
``relay/screen/denied.py``), on a real Xvfb with no window manager: real X clients (their own
connections, one of them another process) map windows, and what reaches them is read from
those connections' own event queues, independently of the service.
"""

from __future__ import annotations

import base64
import io
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from PIL import Image
from Xlib import X
from Xlib import display as xdisplay

from relay.policy import DeniedApps
from relay.screen.service import ScreenService
from tests.support.processes import scaled
from tests.support.stack import wait_until
from tests.support.xvfb import XvfbServer, private_xvfb
from wire.errors import ErrorCode, OpError
from wire.guard import crop_digest, crop_rect, cut

pytestmark = pytest.mark.integration

EVENTS = X.KeyPressMask | X.ButtonPressMask | X.PointerMotionMask | X.EnterWindowMask
DENIED = DeniedApps(frozenset({"secretapp", "secretproc"}))
# A client in a process of its own, whose command (comm) is "secretproc".
OTHER_PROCESS = textwrap.dedent("""
    import ctypes, sys
    from Xlib import X, display
    ctypes.CDLL(None).prctl(15, b"secretproc", 0, 0, 0)
    conn = display.Display(sys.argv[1])
    screen = conn.screen()
    window = screen.root.create_window(600, 300, 150, 150, 0, screen.root_depth,
                                       background_pixel=0x00ff00)
    window.set_wm_class("plain", "Plain")
    window.map()
    conn.sync()
    print("ready", flush=True)
    sys.stdin.read()
""")


class Client:
    """One X client (its own connection) and the windows it maps."""

    def __init__(self, server: XvfbServer) -> None:
        self.conn = xdisplay.Display(server.display)
        self.screen = self.conn.screen()

    def window(
        self, rect: tuple[int, int, int, int], color: int, wm_class: str | None, **extra: Any
    ) -> Any:
        x, y, w, h = rect
        window = self.screen.root.create_window(
            x,
            y,
            w,
            h,
            0,
            self.screen.root_depth,
            background_pixel=color,
            event_mask=EVENTS,
            **extra,
        )
        if wm_class is not None:
            window.set_wm_class(wm_class, wm_class.title())
        window.map()
        self.conn.sync()
        return window

    def events(self) -> list[int]:
        """Event types that reached this client's windows so far."""
        self.conn.sync()
        found = []
        while self.conn.pending_events():
            found.append(self.conn.next_event().type)
        return [t for t in found if t not in (X.Expose, X.MapNotify, X.ConfigureNotify)]


@pytest.fixture(scope="module")
def desk() -> Iterator[dict[str, Any]]:
    with private_xvfb(800, 600) as server:
        secret, plain = Client(server), Client(server)
        parts = {
            "server": server,
            "secret": secret,
            "plain": plain,
            # the denied app's window, partly covered by an allowed one
            "denied": secret.window((100, 100, 200, 200), 0xFF0000, "secretapp"),
            "allowed": plain.window((250, 150, 150, 100), 0x0000FF, "plainapp"),
            # a menu of the denied app: no WM_CLASS, from the same connection
            "popup": secret.window((450, 100, 80, 60), 0xFF00FF, None, override_redirect=True),
        }
        other = subprocess.Popen(
            [sys.executable, "-c", OTHER_PROCESS, server.display],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert other.stdout is not None and other.stdout.readline().strip() == "ready"
            yield parts
        finally:
            other.kill()
            other.wait(timeout=scaled(5))


@pytest.fixture
async def service() -> Any:
    svc = ScreenService(denied=DENIED)
    try:
        yield svc
    finally:
        await svc.aclose()


async def _screen(svc: ScreenService, desk: dict[str, Any]) -> np.ndarray:
    shot = await svc.screenshot(desk["server"].display, {})
    pixels: np.ndarray = shot.pixels
    return pixels


def _refused(err: pytest.ExceptionInfo[OpError]) -> None:
    assert err.value.code is ErrorCode.POLICY_DENIED


async def test_only_the_denied_apps_pixels_are_black(service, desk):
    pixels = await _screen(service, desk)
    assert not pixels[100:300, 100:250].any()  # the denied window where nothing covers it
    assert (pixels[150:250, 250:400] == (0, 0, 255)).all()  # the allowed window above it
    assert not pixels[100:160, 450:530].any()  # the denied app's menu
    assert not pixels[300:450, 600:750].any()  # the window of the denied process
    assert (pixels[500:600, 0:100] == 0).all()  # the bare root stays as it is


async def test_a_zoom_is_masked(service, desk):
    region = {"x": 90, "y": 90, "width": 220, "height": 220}
    zoomed = await service.answer(desk["server"].display, "zoom", {"region": region})
    image = Image.open(io.BytesIO(base64.b64decode(zoomed["image"]))).convert("RGB")
    pixels = np.asarray(image)
    assert not pixels[10:210, 10:160].any()
    assert (pixels[60:160, 160:220] == (0, 0, 255)).all()


async def test_the_guard_compares_masked_pixels(service, desk):
    """A digest of the masked screenshot's crop matches the masked capture at click time:
    a click beside the denied window is not stale because of the mask."""
    display = desk["server"].display
    shot = await service.screenshot(display, {})
    rect = crop_rect((270, 230), (shot.width, shot.height))
    assert rect.x < 250, "the crop must take in the denied window"
    guard = {"digest": crop_digest(cut(shot.pixels, rect)), "rect": rect.to_dict()}
    clicked = await service.run(display, "click", {"x": 270, "y": 230, "guard": guard})
    assert clicked["guard"]["checked"] is True


async def test_a_window_mapped_or_moved_since_the_last_look_is_seen_at_once(service, desk):
    """Between scans the view follows what the root reports: a denied window just mapped,
    then moved over an allowed one, is black where it is now; the allowed one shows again
    where it left."""
    await _screen(service, desk)  # the view has looked: what follows must invalidate it
    late = Client(desk["server"])
    window = late.window((500, 420, 100, 100), 0xFFFF00, "secretapp")
    try:
        assert not (await _screen(service, desk))[420:520, 500:600].any()
        window.configure(x=260, y=160)
        late.conn.sync()
        pixels = await _screen(service, desk)
        assert not pixels[160:260, 260:360].any()
        assert (pixels[420:520, 500:600] == 0).all()
        assert (pixels[200:250, 370:400] == (0, 0, 255)).all()
    finally:
        late.conn.close()
    # The X server destroys a closed client's windows after the close reaches it: wait until
    # it has (a probe, not a sleep), then the allowed window shows again.
    await wait_until(lambda: not _has_child(desk["server"], window.id), scaled(5), "the close")
    assert (await _screen(service, desk))[160:250, 260:360].any()


def _has_child(server: XvfbServer, window_id: int) -> bool:
    """Whether the root of ``server`` still has the window ``window_id``."""
    probe = xdisplay.Display(server.display)
    try:
        return window_id in {w.id for w in probe.screen().root.query_tree().children}
    finally:
        probe.close()


@pytest.mark.parametrize(
    ("action", "args"),
    [
        ("click", {"x": 150, "y": 150}),
        ("click", {"x": 480, "y": 120}),
        ("click", {"x": 650, "y": 350}),
        ("move", {"x": 150, "y": 150}),
        ("drag", {"x": 350, "y": 200, "to_x": 150, "to_y": 150}),
        ("scroll", {"x": 150, "y": 150}),
        ("mouse_down", {"x": 150, "y": 150}),
    ],
)
async def test_pointer_input_at_a_denied_window_sends_nothing(service, desk, action, args):
    display = desk["server"].display
    await service.run(display, "move", {"x": 700, "y": 50})
    desk["secret"].events()
    guard = {"guard": _live()} if action in ("click", "drag", "mouse_down") else {}
    with pytest.raises(OpError) as err:
        await service.run(display, action, {**args, **guard})
    _refused(err)
    assert desk["secret"].events() == []
    assert await service.run(display, "mouse_position", {}) == {"x": 700, "y": 50}


async def test_a_click_on_the_allowed_window_above_it_goes_through(service, desk):
    display = desk["server"].display
    desk["plain"].events()
    await service.run(display, "click", {"x": 300, "y": 200, "guard": _live()})
    assert X.ButtonPress in desk["plain"].events()


async def test_keys_are_refused_while_the_denied_window_has_the_focus(service, desk):
    display = desk["server"].display
    secret, plain = desk["secret"], desk["plain"]
    secret.conn.set_input_focus(desk["denied"], X.RevertToParent, X.CurrentTime)
    secret.events()
    for action, args in (
        ("type", {"text": "hunter2"}),
        ("key", {"keys": "Return"}),
        ("key_down", {"keys": "a"}),
    ):
        with pytest.raises(OpError) as err:
            await service.run(display, action, args)
        _refused(err)
    assert X.KeyPress not in secret.events()
    plain.conn.set_input_focus(desk["allowed"], X.RevertToParent, X.CurrentTime)
    plain.events()
    await service.run(display, "type", {"text": "ok"})
    assert X.KeyPress in plain.events()


def _live() -> object:
    from relay.screen.service import LIVE_BOUNDS

    return LIVE_BOUNDS
