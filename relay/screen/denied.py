"""The windows of denied apps on an X display (``relay/policy.py``): where they are, which
holds the input focus, which lies under a point.

A window is known by its ``WM_CLASS`` (instance and class) and by the command of the process
that opened it, which the X server itself reports (X-Resource: the connection's pid, unlike
``_NET_WM_PID`` not something a client says of itself; read only when the X server shares the
relay's process namespace, so a container's pids are never looked up on the host). The names
go through :func:`relay.policy.app_ids`, as an app's on the accessibility bus do.

An app's other windows — menus, tooltips, a clipboard owner — come from the same X
connection as its managed windows: every window of a connection one of whose top-level windows
is denied is denied too. A window manager's frame is denied with the client it holds.

Everything here blocks (X round trips): the screen service calls it in its display's thread,
the desktop tools off the event loop.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Final

import numpy as np
import numpy.typing as npt
from Xlib import X, Xatom
from Xlib import error as xerror
from Xlib.display import Display
from Xlib.ext import res
from Xlib.xobject.drawable import Window

from relay.policy import DENIED_MESSAGE, DeniedApps, app_ids, command_of
from relay.screen.args import is_display_name
from wire.errors import ErrorCode, OpError
from wire.guard import CropRect

# How deep below a top-level window its client (the window with WM_STATE) is looked for:
# window managers put it one or two levels under their frame.
CLIENT_DEPTH: Final = 3
GONE: Final = (xerror.BadWindow, xerror.BadDrawable, xerror.BadMatch)
# A masked pixel: BGRA (0, 0, 0, 255) as one native word.
BLACK: Final = int(np.frombuffer(bytes((0, 0, 0, 255)), dtype=np.uint32)[0])
# What the root reports to a view (a top-level window mapped, unmapped, moved, restacked,
# created or destroyed; a property of the root such as the client list), and how long a scan
# is reused when it reported nothing (a change no event says: an app renaming its class).
ROOT_EVENTS: Final = X.SubstructureNotifyMask | X.PropertyChangeMask
SCENE_MAX_AGE_S: Final = 1.0


def refusal(what: str) -> OpError:
    """``policy_denied`` for input or a read that would reach a denied app's window."""
    return OpError(
        ErrorCode.POLICY_DENIED,
        f"{what} belongs to an app {DENIED_MESSAGE}: agents may not see or use it",
        {"suggestion": "leave that window alone; pick a window of another app"},
    )


@dataclass(frozen=True)
class TopWindow:
    """A mapped top-level window (a child of the root), on screen, and whether it is denied."""

    window_id: int
    x: int
    y: int
    width: int
    height: int
    denied: bool

    def contains(self, point: tuple[int, int]) -> bool:
        px, py = point
        return self.x <= px < self.x + self.width and self.y <= py < self.y + self.height


@dataclass
class Scene:
    """The display's mapped top-level windows, bottom to top, as one scan found them."""

    windows: list[TopWindow] = field(default_factory=list)
    # X connections (their resource-id base) with a denied top-level window.
    denied_clients: set[int] = field(default_factory=set)

    def at(self, point: tuple[int, int]) -> TopWindow | None:
        """The topmost window at ``point`` (None: the root)."""
        for window in reversed(self.windows):
            if window.contains(point):
                return window
        return None

    def mask(self, region: CropRect) -> npt.NDArray[np.bool_] | None:
        """Which pixels of ``region`` show a denied window (None: none)."""
        if not any(w.denied for w in self.windows):
            return None
        mask = np.zeros((region.height, region.width), dtype=np.bool_)
        for window in self.windows:  # a window above paints over the ones below
            x0, y0 = max(window.x - region.x, 0), max(window.y - region.y, 0)
            x1 = min(window.x + window.width - region.x, region.width)
            y1 = min(window.y + window.height - region.y, region.height)
            if x0 < x1 and y0 < y1:
                mask[y0:y1, x0:x1] = window.denied
        return mask if mask.any() else None


def black_out(
    bgra: npt.NDArray[np.uint8], region: CropRect, *scenes: Scene
) -> npt.NDArray[np.uint8]:
    """``bgra`` (showing ``region``) with every pixel that any of ``scenes`` has under a
    denied window black (painted in place when it can be)."""
    if not bgra.flags.writeable or not bgra.flags.c_contiguous:
        bgra = np.array(bgra)
    pixels = bgra.view(np.uint32).reshape(bgra.shape[:2])  # one word a pixel: ~20x faster
    for scene in {id(scene): scene for scene in scenes}.values():
        mask = scene.mask(region)
        if mask is not None:
            pixels[mask] = BLACK
    return bgra


class DeniedWindows:
    """One X connection's view of a display's windows under the relay's denied apps."""

    def __init__(self, display: Display, apps: DeniedApps) -> None:
        self.display = display
        self.apps = apps
        self.root = display.screen().root
        self._client_mask = ~int(display.display.info.resource_id_mask)
        self._atoms: dict[str, int] = {}
        self._scene: Scene | None = None
        self._scanned_at = 0.0
        # Asked once, and only of a relay that denies apps.
        self._pids = bool(apps) and _server_pids(display)
        if apps:  # the root then reports every change a scan would see (scene)
            self.root.change_attributes(event_mask=ROOT_EVENTS)

    @classmethod
    def open(cls, display_name: str, apps: DeniedApps) -> DeniedWindows:
        """A view through a connection of its own (closed by :meth:`close`). A screen that is
        not an X display cannot tell apps apart: everything is refused there."""
        if not is_display_name(display_name):
            raise OpError(
                ErrorCode.POLICY_DENIED,
                f"this screen is not an X display, so the windows of apps {DENIED_MESSAGE} "
                "cannot be told apart from others: agents may not use it",
            )
        try:
            display = Display(display_name)
        except (xerror.DisplayError, OSError) as err:
            raise OpError(ErrorCode.UNAVAILABLE, f"cannot open display {display_name}") from err
        try:
            return cls(display, apps)
        except BaseException:
            display.close()
            raise

    def close(self) -> None:
        self.display.close()

    # -- identities ------------------------------------------------------------------------

    def client_of(self, window_id: int) -> int:
        """The X connection that made a window (its resource-id base)."""
        return window_id & self._client_mask

    def ids(self, window: Window, wm_class: tuple[str, str] | None = None) -> frozenset[str]:
        """The names the app of ``window`` is known by (:func:`relay.policy.app_ids`)."""
        names = wm_class or window.get_wm_class() or ()
        return app_ids(names, command_of(self._pid(window.id)))

    def _pid(self, window_id: int) -> int | None:
        if not self._pids:
            return None
        spec = {"client": self.client_of(window_id), "mask": res.LocalClientPIDMask}
        for value in self.display.res_query_client_ids([spec]).ids:
            if value.value:
                return int(value.value[0])
        return None

    def denied(self, window_id: int) -> bool:
        """Whether a client window (one ``desktop_windows`` lists) belongs to a denied app."""
        if not self.apps:
            return False
        try:
            return self.apps.denies(self.ids(self._window(window_id)))
        except GONE:
            return False

    # -- a scan ----------------------------------------------------------------------------

    def scene(self) -> Scene:
        """The mapped top-level windows now, bottom to top, each denied or not: scanned again
        when the root reported a change since the last scan (a window mapped, unmapped, moved,
        restacked; the window manager's client list), else at most ``SCENE_MAX_AGE_S`` old."""
        if not self.apps:
            return Scene()
        changed = self._root_changed()
        age = time.monotonic() - self._scanned_at
        if changed or self._scene is None or age > SCENE_MAX_AGE_S:
            self._scanned_at = time.monotonic()
            self._scene = self._scan()
        return self._scene

    def _root_changed(self) -> bool:
        """Whether the root reported a change since the last look: what it reported up to
        now (one round trip) is read and dropped, so a change during the scan that follows
        is seen by the next look."""
        self.display.sync()
        changed = False
        while self.display.pending_events():
            self.display.next_event()
            changed = True
        return changed

    def _scan(self) -> Scene:
        scene = Scene()
        tops: dict[int, bool] = {}  # frame (or client) → whether it holds a denied client
        for client in self._managed():
            denied = self.denied(client)
            if denied:
                scene.denied_clients.add(self.client_of(client))
            if (top := self._top_of(client)) is not None:
                tops[top] = tops.get(top, False) or denied
        for window in self.root.query_tree().children:
            try:
                shown = self._top_window(window, tops, scene.denied_clients)
            except GONE:
                continue
            if shown is not None:
                scene.windows.append(shown)
        # A denied window no window manager lists makes its connection's others denied too
        # (a menu mapped below it in the stacking order included).
        scene.windows = [
            replace(w, denied=True) if self.client_of(w.window_id) in scene.denied_clients else w
            for w in scene.windows
        ]
        return scene

    def _managed(self) -> list[int]:
        prop = self.root.get_full_property(self._atom("_NET_CLIENT_LIST"), Xatom.WINDOW)
        return [int(v) for v in prop.value] if prop is not None else []

    def _top_window(
        self, window: Window, tops: dict[int, bool], denied_clients: set[int]
    ) -> TopWindow | None:
        attributes = window.get_attributes()
        if attributes.map_state != X.IsViewable or attributes.win_class == X.InputOnly:
            return None
        geometry = window.get_geometry()
        border = 2 * int(geometry.border_width)
        if window.id in tops:
            denied = tops[window.id]
        else:  # a window no window manager lists: a menu, a tooltip, a desktop without one
            found = self._denied_in(window)
            if found is not None:
                denied_clients.add(self.client_of(found))
            denied = found is not None or self.client_of(window.id) in denied_clients
        width, height = int(geometry.width) + border, int(geometry.height) + border
        return TopWindow(window.id, int(geometry.x), int(geometry.y), width, height, denied)

    def _denied_in(self, window: Window) -> int | None:
        """The denied window a top-level window is, or holds as its client (None: none)."""
        wm_class = window.get_wm_class()
        if self.apps.denies(self.ids(window, wm_class)):
            return int(window.id)
        if wm_class:  # a client itself: nothing of another app inside
            return None
        for inner in self._clients_in(window):
            if self.apps.denies(self.ids(inner)):
                return int(inner.id)
        return None

    def _clients_in(self, window: Window) -> Iterator[Window]:
        level = [window]
        for _ in range(CLIENT_DEPTH):
            level = [c for w in level for c in w.query_tree().children]
            for child in level:
                if child.get_full_property(self._atom("WM_STATE"), X.AnyPropertyType):
                    yield child

    def _top_of(self, window_id: int) -> int | None:
        """The child of the root that holds a window (itself, or its frame)."""
        current = window_id
        try:
            while True:
                parent = _id(self._window(current).query_tree().parent)
                if parent in (0, int(self.root.id)):
                    return current
                current = parent
        except GONE:
            return None

    def _atom(self, name: str) -> int:
        if name not in self._atoms:
            self._atoms[name] = self.display.intern_atom(name)
        return self._atoms[name]

    def _window(self, window_id: int) -> Window:
        return self.display.create_resource_object("window", window_id)

    # -- questions -------------------------------------------------------------------------

    def point_denied(self, point: tuple[int, int], scene: Scene | None = None) -> bool:
        """Whether the window under ``point`` is a denied app's."""
        found = (scene or self.scene()).at(point)
        return found is not None and found.denied

    def focus_denied(self) -> bool:
        """Whether keys typed now would reach a denied app: its window holds the input focus
        (or, with the focus following the pointer, lies under the pointer)."""
        if not self.apps:
            return False
        scene = self.scene()
        focus = _id(self.display.get_input_focus().focus)
        if focus == X.PointerRoot:
            pointer = self.root.query_pointer()
            return self.point_denied((int(pointer.root_x), int(pointer.root_y)), scene)
        return focus != X.NONE and self._window_denied(focus, scene)

    def owner_denied(self, selection: str) -> bool:
        """Whether a denied app owns ``selection`` (what a read of it would give)."""
        if not self.apps:
            return False
        owner = _id(self.display.get_selection_owner(self.display.intern_atom(selection)))
        return owner != X.NONE and self._window_denied(owner, self.scene())

    def _window_denied(self, window_id: int, scene: Scene) -> bool:
        if self.client_of(window_id) in scene.denied_clients:
            return True
        top = self._top_of(window_id)
        return any(w.denied for w in scene.windows if w.window_id == top)


def _server_pids(display: Display) -> bool:
    """Whether the X server reports clients' pids in this process's namespace: it names our
    own connection by our pid (a desktop in a container runs its X server in another)."""
    if not display.has_extension("X-Resource"):
        return False
    spec = {"client": int(display.display.info.resource_id_base), "mask": res.LocalClientPIDMask}
    try:
        values = display.res_query_client_ids([spec]).ids
    except xerror.XError:
        return False
    return any(v.value and int(v.value[0]) == os.getpid() for v in values)


def _id(window: object) -> int:
    """A window field of a reply as its id (python-xlib gives 0 and PointerRoot as numbers)."""
    found = getattr(window, "id", window)
    return found if isinstance(found, int) else 0
