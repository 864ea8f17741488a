"""Top-level windows of a desktop's display through EWMH (python-xlib): the list, and the
window operations, each followed until the window manager shows its effect (bounded).

Everything here blocks (X round trips): callers run it off the event loop. One short X
connection per call, opened with the relay's own authority file like its screen tool's.
Geometry is the client window's (without the window manager's frame) in root coordinates,
and a move places the client window there (``StaticGravity``), so what ``move`` is given is
what the list shows afterwards.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Final

from Xlib import X, Xatom
from Xlib import error as xerror
from Xlib.display import Display
from Xlib.protocol import event
from Xlib.xobject.drawable import Window

from relay.policy import DeniedApps
from relay.screen.args import is_display_name
from relay.screen.denied import DeniedWindows, refusal
from wire.desktop_tool_args import WindowOp
from wire.errors import ErrorCode, OpError
from wire.ops import WindowInfo

# How long an operation's effect is waited for; it is not an error when it does not show
# (a close the app answers with a dialog, a size the app's hints round).
SETTLE_S: Final = 1.0
SETTLE_POLL_S: Final = 0.02
# EWMH: the request comes from a pager (window managers honour those without focus-stealing
# prevention); _NET_WM_STATE actions; ICCCM's iconic state; gravity of a move.
SOURCE_PAGER: Final = 2
STATE_REMOVE, STATE_ADD = 0, 1
ICONIC_STATE: Final = 3
STATIC_GRAVITY: Final = 10
MOVE_FLAGS: Final = (1 << 8) | (1 << 9)
# The most a window manager's placement of a moved client may be off by (its border).
MAX_BORDER_SLIP: Final = 32
RESIZE_FLAGS: Final = (1 << 10) | (1 << 11)
MAXIMIZED: Final = ("_NET_WM_STATE_MAXIMIZED_VERT", "_NET_WM_STATE_MAXIMIZED_HORZ")
HIDDEN: Final = "_NET_WM_STATE_HIDDEN"
CLIENT_MESSAGE_MASK: Final = X.SubstructureRedirectMask | X.SubstructureNotifyMask

Geometry = tuple[int, int, int, int]


class Ewmh:
    """One X connection to a desktop's display, read and driven the EWMH way."""

    def __init__(self, display_name: str) -> None:
        if not is_display_name(display_name):
            # python-xlib would fall back to $DISPLAY for "": never guess which screen.
            raise OpError(ErrorCode.UNAVAILABLE, f"no X display at {display_name!r}")
        try:
            self.display = Display(display_name)
        except (xerror.DisplayError, OSError) as err:
            raise OpError(ErrorCode.UNAVAILABLE, f"cannot open display {display_name}") from err
        self.root = self.display.screen().root
        self._atoms: dict[str, int] = {}

    def close(self) -> None:
        self.display.close()

    def atom(self, name: str) -> int:
        if name not in self._atoms:
            self._atoms[name] = self.display.intern_atom(name)
        return self._atoms[name]

    def window(self, window_id: int) -> Window:
        return self.display.create_resource_object("window", window_id)

    def _ints(self, window: Window, name: str, kind: int = X.AnyPropertyType) -> list[int]:
        prop = window.get_full_property(self.atom(name), kind)
        return [int(v) for v in prop.value] if prop is not None and prop.format == 32 else []

    # -- reading -------------------------------------------------------------------------

    def has_window_manager(self) -> bool:
        return bool(self._ints(self.root, "_NET_SUPPORTING_WM_CHECK"))

    def clients(self) -> list[int]:
        return self._ints(self.root, "_NET_CLIENT_LIST", Xatom.WINDOW)

    def active(self) -> int | None:
        found = [w for w in self._ints(self.root, "_NET_ACTIVE_WINDOW") if w]
        return found[0] if found else None

    def states(self, window_id: int) -> set[int]:
        return set(self._ints(self.window(window_id), "_NET_WM_STATE", Xatom.ATOM))

    def minimized(self, window_id: int) -> bool:
        return self.atom(HIDDEN) in self.states(window_id)

    def maximized(self, window_id: int) -> bool:
        return {self.atom(n) for n in MAXIMIZED} <= self.states(window_id)

    def geometry(self, window_id: int) -> Geometry:
        window = self.window(window_id)
        size = window.get_geometry()
        origin = self.root.translate_coords(window, 0, 0)
        return (int(origin.x), int(origin.y), int(size.width), int(size.height))

    def name(self, window: Window) -> str:
        prop = window.get_full_property(self.atom("_NET_WM_NAME"), self.atom("UTF8_STRING"))
        if prop is None or not prop.value:
            prop = window.get_full_property(Xatom.WM_NAME, X.AnyPropertyType)
        return _text(prop.value) if prop is not None else ""

    def info(self, window_id: int, active: int | None) -> WindowInfo:
        window = self.window(window_id)
        wm_class = window.get_wm_class()
        app = (wm_class[1] or wm_class[0]) if wm_class else ""
        pids = self._ints(window, "_NET_WM_PID", Xatom.CARDINAL)
        x, y, width, height = self.geometry(window_id)
        return {
            "id": window_id,
            "name": self.name(window),
            "pid": pids[0] if pids else None,
            "app": app.lower(),
            "x": x,
            "y": y,
            "width": width,
            "height": height,
            "active": window_id == active,
            "minimized": self.minimized(window_id),
        }

    # -- driving -------------------------------------------------------------------------

    def message(self, window_id: int, kind: str, data: list[int]) -> None:
        """Send a client message about the window to the root (the window manager)."""
        message = event.ClientMessage(
            window=self.window(window_id),
            client_type=self.atom(kind),
            # 32-bit fields travel unsigned: a negative coordinate as its two's complement
            data=(32, [v & 0xFFFFFFFF for v in [*data, 0, 0, 0, 0, 0][:5]]),
        )
        self.root.send_event(message, event_mask=CLIENT_MESSAGE_MASK)
        self.display.flush()

    def set_maximized(self, window_id: int, on: bool) -> None:
        first, second = (self.atom(n) for n in MAXIMIZED)
        action = STATE_ADD if on else STATE_REMOVE
        self.message(window_id, "_NET_WM_STATE", [action, first, second, SOURCE_PAGER])

    def move_resize(self, window_id: int, flags: int, geometry: Geometry) -> None:
        data = [STATIC_GRAVITY | flags | (SOURCE_PAGER << 12), *geometry]
        self.message(window_id, "_NET_MOVERESIZE_WINDOW", data)


@contextmanager
def connected(display_name: str) -> Iterator[Ewmh]:
    """An :class:`Ewmh` connection; X errors of a window that went away mid-call and a lost
    connection become ``OpError``."""
    ewmh = Ewmh(display_name)
    try:
        yield ewmh
    except xerror.ConnectionClosedError as err:
        raise OpError(ErrorCode.UNAVAILABLE, "the desktop's display went away") from err
    except (xerror.BadWindow, xerror.BadDrawable) as err:
        raise OpError(ErrorCode.NOT_FOUND, "the window went away", {"field": "window_id"}) from err
    finally:
        ewmh.close()


def list_windows(display_name: str, denied: DeniedApps) -> tuple[list[WindowInfo], int | None]:
    """The display's top-level client windows in the window manager's order, and the active
    one; a window closed while it is read is left out, and so is a denied app's."""
    with connected(display_name) as ewmh:
        policy = DeniedWindows(ewmh.display, denied)
        active = ewmh.active()
        clients = [c for c in ewmh.clients() if not policy.denied(c)]
        # Some window managers keep naming the last active window after it closed.
        active = active if active in clients else None
        windows: list[WindowInfo] = []
        for window_id in clients:
            try:
                windows.append(ewmh.info(window_id, active))
            except (xerror.BadWindow, xerror.BadDrawable):
                continue
        return windows, active


def apply(
    display_name: str,
    window_id: int,
    op: WindowOp,
    values: dict[str, int],
    denied: DeniedApps,
) -> None:
    """Ask the window manager for ``op`` on the window and follow it until it shows (at most
    :data:`SETTLE_S`); ``not_found`` for a window that is not a top-level client,
    ``policy_denied`` for a denied app's."""
    with connected(display_name) as ewmh:
        if not ewmh.has_window_manager():
            raise OpError(ErrorCode.UNAVAILABLE, "no window manager runs in this desktop")
        if window_id not in ewmh.clients():
            raise OpError(
                ErrorCode.NOT_FOUND,
                f"window_id {window_id} is not a top-level window of this desktop "
                "(desktop_windows lists them)",
                {"field": "window_id"},
            )
        if DeniedWindows(ewmh.display, denied).denied(window_id):
            raise refusal(f"window_id {window_id}")
        settled = OPS[op](ewmh, window_id, values)
        _settle(settled)


def _activate(ewmh: Ewmh, window_id: int, values: dict[str, int]) -> Callable[[], bool]:
    ewmh.message(window_id, "_NET_ACTIVE_WINDOW", [SOURCE_PAGER, X.CurrentTime, 0])
    return lambda: ewmh.active() == window_id and not ewmh.minimized(window_id)


def _close(ewmh: Ewmh, window_id: int, values: dict[str, int]) -> Callable[[], bool]:
    ewmh.message(window_id, "_NET_CLOSE_WINDOW", [X.CurrentTime, SOURCE_PAGER])
    return lambda: window_id not in ewmh.clients()


def _maximize(ewmh: Ewmh, window_id: int, values: dict[str, int]) -> Callable[[], bool]:
    ewmh.set_maximized(window_id, True)
    return lambda: ewmh.maximized(window_id)


def _minimize(ewmh: Ewmh, window_id: int, values: dict[str, int]) -> Callable[[], bool]:
    ewmh.message(window_id, "WM_CHANGE_STATE", [ICONIC_STATE])
    return lambda: ewmh.minimized(window_id)


def _restored(ewmh: Ewmh, window_id: int) -> Geometry:
    """The window un-maximized first (a window manager keeps a maximized window's place and
    size); its geometry then."""
    if ewmh.maximized(window_id):
        ewmh.set_maximized(window_id, False)
        _settle(lambda: not ewmh.maximized(window_id))
    return ewmh.geometry(window_id)


def _move(ewmh: Ewmh, window_id: int, values: dict[str, int]) -> Callable[[], bool]:
    before = _restored(ewmh, window_id)
    target = (values["x"], values["y"])
    ewmh.move_resize(window_id, MOVE_FLAGS, (*target, 0, 0))
    _settle(lambda: ewmh.geometry(window_id)[:2] == target or _moved(ewmh, window_id, before))
    # A window manager may place the client by its original border (StaticGravity's reference
    # point): one corrected request puts the client window itself where it was asked.
    x, y = ewmh.geometry(window_id)[:2]
    dx, dy = x - target[0], y - target[1]
    if (dx, dy) != (0, 0) and max(abs(dx), abs(dy)) <= MAX_BORDER_SLIP:
        ewmh.move_resize(window_id, MOVE_FLAGS, (target[0] - dx, target[1] - dy, 0, 0))
    return lambda: ewmh.geometry(window_id)[:2] == target


def _resize(ewmh: Ewmh, window_id: int, values: dict[str, int]) -> Callable[[], bool]:
    before = _restored(ewmh, window_id)
    target = (values["width"], values["height"])
    ewmh.move_resize(window_id, RESIZE_FLAGS, (0, 0, *target))
    return lambda: ewmh.geometry(window_id)[2:] == target or _moved(ewmh, window_id, before)


def _moved(ewmh: Ewmh, window_id: int, before: Geometry) -> bool:
    return ewmh.geometry(window_id) != before


OPS: Final[dict[WindowOp, Callable[[Ewmh, int, dict[str, int]], Callable[[], bool]]]] = {
    "activate": _activate,
    "close": _close,
    "maximize": _maximize,
    "minimize": _minimize,
    "move": _move,
    "resize": _resize,
}


def _settle(done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + SETTLE_S
    while True:
        try:
            if done():
                return
        except (xerror.BadWindow, xerror.BadDrawable):
            return  # gone: nothing more will show
        if time.monotonic() >= deadline:
            return
        time.sleep(SETTLE_POLL_S)


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    raw = bytes(value)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")
