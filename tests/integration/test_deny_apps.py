"""A relay's denied apps (``RELAYDESK_DENY_APPS``) against every agent tool, end to end: an
in-process server, a real relay process, a real desktop running a denied GTK app (the tests'
form, denied by its old setting's name), a denied xterm (by its ``WM_CLASS`` instance) and
an allowed xterm, driven with the seeded agent's bearer token.

What reached the apps is read independently of the tools under test: pixels and the pointer
through the test's own X connection, the form's state file, and the file the denied xterm's
``cat`` writes whatever is typed into it. Focus is moved the way a person would, through the
window manager (``_NET_ACTIVE_WINDOW`` from the test's own connection).
"""

from __future__ import annotations

import base64
import io
from collections.abc import AsyncIterator
from typing import Any

import numpy as np
import pytest
import pytest_asyncio
from PIL import Image
from Xlib import X, Xatom
from Xlib import display as xdisplay
from Xlib.protocol import event as xevent

from tests.support.a11y_stack import FORM, QT_FORM, A11yStack, a11y_stack
from tests.support.processes import scaled
from tests.support.stack import wait_until
from wire.ids import RelayId
from wire.ops import DENIED_APPS_CAPABILITY

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

FORM_TITLE, QT_TITLE = "relaydesk form", "relaydesk qt form"
SECRET, ALLOWED = "secret-term", "allowed-term"
SECRET_TERM = (
    f"xterm -name secretterm -T {SECRET} -geometry 60x8+900+480 "
    "-e sh -c 'cat > {shared}/typed.txt'"
)
ALLOWED_TERM = f"xterm -T {ALLOWED} -geometry 60x20+470+40"
Rect = tuple[int, int, int, int]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[A11yStack]:
    env = {
        "RELAYDESK_A11Y_DENY_APPS": "a11y_app.py",
        "RELAYDESK_DENY_APPS": "SecretTerm,a11y_qt_app.py",
    }
    root = tmp_path_factory.mktemp("deny-apps")
    apps = [FORM, QT_FORM, SECRET_TERM, ALLOWED_TERM]
    async with a11y_stack(root, apps, env) as stack:
        await wait_until(lambda: stack.state() != {}, scaled(30), "the form to start")
        for title in (FORM_TITLE, QT_TITLE, SECRET, ALLOWED):
            await wait_until(lambda t=title: _client(stack, t) is not None, 30, title)
        yield stack


# -- the test's own view of the desktop ---------------------------------------------------


def _with_display(stack: A11yStack, fn: Any) -> Any:
    conn = xdisplay.Display(stack.display)
    try:
        return fn(conn)
    finally:
        conn.close()


def _clients(conn: xdisplay.Display) -> dict[str, int]:
    root = conn.screen().root
    prop = root.get_full_property(conn.intern_atom("_NET_CLIENT_LIST"), Xatom.WINDOW)
    found = {}
    for window_id in prop.value if prop is not None else ():
        window = conn.create_resource_object("window", window_id)
        found[str(window.get_wm_name() or "")] = int(window_id)
    return found


def _client(stack: A11yStack, title: str) -> int | None:
    found: int | None = _with_display(stack, lambda conn: _clients(conn).get(title))
    return found


def _frame(stack: A11yStack, title: str) -> Rect:
    """The on-screen rectangle of a window with its window manager frame."""

    def read(conn: xdisplay.Display) -> Rect:
        window = conn.create_resource_object("window", _clients(conn)[title])
        root = conn.screen().root
        while (parent := window.query_tree().parent).id != root.id:
            window = parent
        g = window.get_geometry()
        return (g.x, g.y, g.width + 2 * g.border_width, g.height + 2 * g.border_width)

    rect: Rect = _with_display(stack, read)
    return rect


def _pixels(stack: A11yStack, rect: Rect) -> np.ndarray:
    def read(conn: xdisplay.Display) -> np.ndarray:
        x, y, w, h = rect
        raw = conn.screen().root.get_image(x, y, w, h, X.ZPixmap, 0xFFFFFFFF)
        return np.frombuffer(raw.data, np.uint8).reshape(h, w, 4)[:, :, 2::-1]

    pixels: np.ndarray = _with_display(stack, read)
    return pixels


def _pointer(stack: A11yStack) -> tuple[int, int]:
    def read(conn: xdisplay.Display) -> tuple[int, int]:
        at = conn.screen().root.query_pointer()
        return (at.root_x, at.root_y)

    point: tuple[int, int] = _with_display(stack, read)
    return point


def _focus_top(conn: xdisplay.Display) -> int:
    """The client window holding the focus (the focus may be on a child of it)."""
    clients = set(_clients(conn).values())
    window = conn.get_input_focus().focus
    while hasattr(window, "id") and window.id not in clients and window.id:
        window = window.query_tree().parent
    return int(getattr(window, "id", 0))


async def _activate(stack: A11yStack, title: str) -> None:
    """Give a window the focus as a person would: through the window manager (asked again
    while it has not shown: a window manager may drop a request that races another)."""

    def ask(conn: xdisplay.Display) -> None:
        root = conn.screen().root
        message = xevent.ClientMessage(
            window=conn.create_resource_object("window", _clients(conn)[title]),
            client_type=conn.intern_atom("_NET_ACTIVE_WINDOW"),
            data=(32, [2, X.CurrentTime, 0, 0, 0]),
        )
        mask = X.SubstructureRedirectMask | X.SubstructureNotifyMask
        root.send_event(message, event_mask=mask)
        conn.flush()

    wanted = _client(stack, title)
    for _attempt in range(10):
        _with_display(stack, ask)
        try:
            await wait_until(lambda: _with_display(stack, _focus_top) == wanted, 3, title)
            return
        except AssertionError:
            continue
    raise AssertionError(f"{title} never got the focus")


def _inside(rect: Rect, dx: int = 0, dy: int = 0) -> tuple[int, int]:
    """A point well inside ``rect`` (its middle, moved by dx, dy)."""
    return (rect[0] + rect[2] // 2 + dx, rect[1] + rect[3] // 2 + dy)


def _typed(stack: A11yStack) -> str:
    try:
        return (stack.shared / "typed.txt").read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""


# -- calls --------------------------------------------------------------------------------


async def _shot(stack: A11yStack, **body: Any) -> tuple[dict[str, Any], np.ndarray]:
    shot = await stack.ok("screen", action=body.pop("action", "screenshot"), **body)
    image = Image.open(io.BytesIO(base64.b64decode(shot["image"]))).convert("RGB")
    return shot, np.asarray(image)


def _refused(status: int, body: dict[str, Any]) -> None:
    assert (status, body["ok"], body["error"]["code"]) == (403, False, "policy_denied"), body


async def _park_pointer(stack: A11yStack) -> tuple[int, int]:
    """Put the pointer on the allowed xterm (an allowed move) and say where it is."""
    at = _inside(_frame(stack, ALLOWED))
    await stack.ok("screen", action="move", x=at[0], y=at[1])
    assert _pointer(stack) == at
    return at


# -- screenshots --------------------------------------------------------------------------


async def test_a_screenshot_is_black_where_denied_windows_are_and_shows_the_rest(stack):
    shot, image = await _shot(stack)
    for title in (FORM_TITLE, QT_TITLE, SECRET):
        x, y, w, h = _frame(stack, title)
        assert _pixels(stack, (x, y, w, h)).any(), f"{title} draws nothing on the screen"
        assert not image[y : y + h, x : x + w].any(), f"{title} shows in the agent's screenshot"
    x, y, w, h = _frame(stack, ALLOWED)
    assert (image[y : y + h, x : x + w] == _pixels(stack, (x, y, w, h))).all()
    assert shot["screen_revision"]


async def test_zooms_and_lossy_images_are_black_there_too(stack):
    rect = _frame(stack, FORM_TITLE)
    region = dict(zip(("x", "y", "width", "height"), rect, strict=True))
    _zoom, image = await _shot(stack, action="zoom", region=region, scale=2)
    assert image.shape[:2] == (rect[3] * 2, rect[2] * 2)
    assert not image.any()
    _jpeg, lossy = await _shot(stack, format="jpeg", quality=90)
    x, y, w, h = rect
    assert lossy[y + 4 : y + h - 4, x + 4 : x + w - 4].max() < 16


# -- pointer ------------------------------------------------------------------------------


async def test_a_click_on_a_denied_window_is_refused_and_sends_nothing(stack):
    before = stack.state()
    parked = await _park_pointer(stack)
    shot, _ = await _shot(stack)
    x, y = _inside(_frame(stack, FORM_TITLE))
    status, body = await stack.act(
        "screen", action="click", x=x, y=y, expected_screen_revision=shot["screen_revision"]
    )
    _refused(status, body)
    assert _pointer(stack) == parked
    assert stack.state() == before


@pytest.mark.parametrize(
    "action",
    ["move", "double_click", "drag_onto", "drag_from", "scroll", "mouse_down", "mouse_up"],
)
async def test_every_pointer_action_at_a_denied_window_is_refused(stack, action):
    parked = await _park_pointer(stack)
    shot, _ = await _shot(stack)
    x, y = _inside(_frame(stack, SECRET))
    revision = {"expected_screen_revision": shot["screen_revision"]}
    here, there = {"x": parked[0], "y": parked[1]}, {"x": x, "y": y}
    bodies: dict[str, dict[str, Any]] = {
        "move": {"action": "move", "x": x, "y": y},
        "double_click": {"action": "double_click", "x": x, "y": y, **revision},
        "drag_onto": {"action": "drag", "from": here, "to": there, **revision},
        "drag_from": {"action": "drag", "from": there, "to": here, **revision},
        "scroll": {"action": "scroll", "x": x, "y": y, "direction": "down"},
        "mouse_down": {"action": "mouse_down", "x": x, "y": y, **revision},
        "mouse_up": {"action": "mouse_up", "x": x, "y": y},
    }
    status, answer = await stack.act("screen", **bodies[action])
    _refused(status, answer)
    assert _pointer(stack) == parked


async def test_a_guarded_click_beside_a_denied_window_is_not_stale(stack):
    """The guard compares the masked screenshot with a masked capture: a click on the
    allowed xterm whose guard region takes in the denied form still lands."""
    form, allowed = _frame(stack, FORM_TITLE), _frame(stack, ALLOWED)
    x, y = allowed[0] + 8, allowed[1] + 60
    assert x - form[0] - form[2] < 64, "the guard region must reach the denied form"
    shot, _ = await _shot(stack)
    clicked = await stack.ok(
        "screen", action="click", x=x, y=y, expected_screen_revision=shot["screen_revision"]
    )
    assert clicked["guard"]["checked"] is True
    assert _pointer(stack) == (x, y)


# -- keys ---------------------------------------------------------------------------------


async def test_typing_while_a_denied_window_has_the_focus_is_refused(stack):
    await _activate(stack, SECRET)
    for body in (
        {"action": "type", "text": "hunter2\n"},
        {"action": "key", "key": "Return"},
        {"action": "key_down", "key": "a"},
    ):
        status, answer = await stack.act("screen", **body)
        _refused(status, answer)
    # what would have arrived by now: an allowed window takes the same keys at once
    await _activate(stack, ALLOWED)
    await stack.ok("screen", action="type", text="echo fine\n")
    assert _typed(stack) == ""


# -- windows and clipboard ----------------------------------------------------------------


async def test_the_windows_tool_neither_lists_nor_touches_denied_windows(stack):
    listed = await stack.ok("desktop_windows")
    titles = {w["name"] for w in listed["windows"]}
    assert ALLOWED in titles
    assert not titles & {FORM_TITLE, QT_TITLE, SECRET}, titles
    denied_ids = {_client(stack, t) for t in (FORM_TITLE, QT_TITLE, SECRET)}
    assert not {w["id"] for w in listed["windows"]} & denied_ids
    before = _frame(stack, SECRET)
    for op, extra in (("activate", {}), ("move", {"x": 300, "y": 300}), ("close", {})):
        status, body = await stack.act(
            "desktop_window", op=op, window_id=_client(stack, SECRET), **extra
        )
        _refused(status, body)
    assert _frame(stack, SECRET) == before
    await stack.ok("desktop_window", op="activate", window_id=_client(stack, ALLOWED))


async def test_the_active_denied_window_is_not_named(stack):
    await _activate(stack, SECRET)
    listed = await stack.ok("desktop_windows")
    assert listed["active"] is None


async def test_the_clipboard_is_refused_while_a_denied_window_has_the_focus(stack):
    await _activate(stack, ALLOWED)
    await stack.ok("desktop_clipboard_set", text="allowed text")
    assert (await stack.ok("desktop_clipboard_get"))["text"] == "allowed text"
    await _activate(stack, SECRET)
    for name, body in (("desktop_clipboard_get", {}), ("desktop_clipboard_set", {"text": "x"})):
        status, answer = await stack.act(name, **body)
        _refused(status, answer)
    await _activate(stack, ALLOWED)
    assert (await stack.ok("desktop_clipboard_get"))["text"] == "allowed text"


# -- accessibility: the same names ---------------------------------------------------------


async def test_the_relay_tells_the_server_it_denies_apps(stack):
    """What the server needs to keep agents' viewers (which cannot be masked) away."""
    hub = stack.app.state.parts.relays
    assert DENIED_APPS_CAPABILITY in hub.capabilities(RelayId(stack.relay_id))


@pytest.mark.parametrize("name", ["a11y_app.py", "a11y_qt_app.py"])
async def test_the_accessibility_tools_deny_the_same_apps(stack, name):
    """A GTK and a Qt app say the same name on the accessibility bus as in WM_CLASS."""

    async def listed() -> list[dict[str, Any]]:
        running = (await stack.ok("desktop_apps"))["running"]
        return [app for app in running if app["name"] == name]

    await wait_until(listed, 30, f"{name} on the accessibility bus")
    (app,) = await listed()
    assert app["policy"] == "denied" and app["windows"] == [], app
    assert "RELAYDESK_DENY_APPS" in app["reason"]


async def test_allowed_windows_still_work(stack):
    await _activate(stack, ALLOWED)
    x, y = _inside(_frame(stack, ALLOWED))
    shot, _ = await _shot(stack)
    revision = shot["screen_revision"]
    await stack.ok("screen", action="click", x=x, y=y, expected_screen_revision=revision)
    await stack.ok("screen", action="key", key="ctrl+l")
    await stack.ok("screen", action="scroll", x=x, y=y, direction="up")
    assert _pointer(stack) == (x, y)
