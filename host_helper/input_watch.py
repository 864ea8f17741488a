"""A person at the host's real screen: XInput2 raw events on the helper's display.

The helper's display is the relay host's real screen, where a person may type or move the
mouse at any time. One thread reads XInput2 *raw* key presses, button presses and motion of
every device on the display (python-xlib; raw events arrive whichever window has the focus or
a grab) and counts those of a person: the relay asks for them (``GET /v1/local/input``) and
the server then refuses agent input for a while (docs/control.md).

The agent's own input reaches the same display through XTEST, and so do other X clients'
(``xdotool``, x11vnc for a viewer). Attribution: an event is the agent's only when its source
device is an XTEST device *and* it arrives inside the agent's injection window — while the
helper runs one of its own screen actions, plus ``grace_s`` after it (the X server delivers
the events of an action to this connection a little after the action's final sync). Every
other event is a person's: a physical keyboard or mouse always, another client's XTEST input
outside the agent's windows.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import select
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final

from Xlib import display as xdisplay
from Xlib import error as xerror
from Xlib.ext import xinput
from Xlib.protocol import rq

log = logging.getLogger(__name__)

GRACE_S: Final = 0.5
POLL_S: Final = 0.25
RAW_EVENTS: Final = (xinput.RawKeyPress, xinput.RawButtonPress, xinput.RawMotion)
RAW_MASK: Final = xinput.RawKeyPressMask | xinput.RawButtonPressMask | xinput.RawMotionMask
# The start of every XI2 raw event (python-xlib parses only the device events'): enough to
# tell the event's source device; the valuators that follow are not read.
RAW_EVENT_DATA: Final = rq.Struct(
    xinput.DEVICEID("deviceid"),
    rq.Card32("time"),
    rq.Card32("detail"),
    xinput.DEVICEID("sourceid"),
    rq.Card16("valuators_len"),
    rq.Card32("flags"),
    rq.Pad(4),
)


@dataclass(frozen=True)
class InputReport:
    """What the watch knows: how many person inputs so far, and how long ago the last one."""

    watching: bool
    seq: int
    idle_s: float | None


class Attribution:
    """Whose an event is: the agent's injection windows, pure of I/O (the clock is given)."""

    def __init__(self, grace_s: float = GRACE_S, clock: Callable[[], float] = time.monotonic):
        self.grace_s = grace_s
        self._clock = clock
        self._lock = threading.Lock()
        self._injecting = 0
        self._until = float("-inf")

    @contextlib.contextmanager
    def injecting(self) -> Iterator[None]:
        """The agent's input runs in the body: its XTEST events are not a person's."""
        with self._lock:
            self._injecting += 1
        try:
            yield
        finally:
            with self._lock:
                self._injecting -= 1
                self._until = self._clock() + self.grace_s

    def is_person(self, from_xtest: bool) -> bool:
        """True for a physical device's event, and for XTEST input outside the agent's windows."""
        if not from_xtest:
            return True
        with self._lock:
            return self._injecting == 0 and self._clock() > self._until


class InputWatch:
    """Reads a display's raw input in a thread; ``wait`` answers the relay's long polls."""

    def __init__(self, display: str, attribution: Attribution | None = None) -> None:
        self.display = display
        self.attribution = attribution or Attribution()
        self.watching = False
        self._seq = 0
        self._last: float | None = None
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._changed = asyncio.Event()
        self._wake_pending = False  # at most one wake-up queued on the loop at a time

    def start(self) -> None:
        """Start reading (a display that does not open is logged; nothing is watched)."""
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._run, name="xi2-input-watch", daemon=True)
        self._thread.start()

    def release(self) -> None:
        """End the waits now (the helper is shutting down): each answers what it knows."""
        self._stopping.set()
        self._wake()

    async def stop(self) -> None:
        self.release()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join, POLL_S * 8)

    def report(self) -> InputReport:
        idle = None if self._last is None else max(0.0, time.monotonic() - self._last)
        return InputReport(self.watching, self._seq, idle)

    async def wait(self, after: int, timeout_s: float) -> InputReport:
        """The report once a person input newer than ``after`` happened (or at the timeout);
        at once when ``after`` is not behind (or ahead of) the count."""
        deadline = time.monotonic() + timeout_s
        while (
            self._seq == after
            and not self._stopping.is_set()
            and (left := deadline - time.monotonic()) > 0
        ):
            changed = self._changed
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), left)
        return self.report()

    # -- the reading thread ----------------------------------------------------------------

    def _run(self) -> None:
        try:
            conn = xdisplay.Display(self.display)
        except (xerror.DisplayError, OSError, ValueError) as err:
            log.warning(
                "no XInput2 watch of %s (%s): a person there is not noticed", self.display, err
            )
            return
        try:
            xtest = self._select(conn)
            self.watching = True
            self._read(conn, xtest)
        except Exception:
            log.exception("the XInput2 watch of %s stopped", self.display)
        finally:
            self.watching = False
            conn.close()

    @staticmethod
    def _select(conn: Any) -> frozenset[int]:
        """Raw events of every device on the root window; the ids of the XTEST devices."""
        info = conn.query_extension("XInputExtension")
        if info is None:
            raise RuntimeError("the display has no XInput extension")
        xinput.XIQueryVersion(
            display=conn.display, opcode=info.major_opcode, major_version=2, minor_version=2
        )
        for event in RAW_EVENTS:
            conn.ge_add_event_data(info.major_opcode, event, RAW_EVENT_DATA)
        conn.screen().root.xinput_select_events([(xinput.AllMasterDevices, RAW_MASK)])
        devices = conn.xinput_query_device(xinput.AllDevices).devices
        conn.flush()
        return frozenset(d.deviceid for d in devices if "XTEST" in str(d.name))

    def _read(self, conn: Any, xtest: frozenset[int]) -> None:
        while not self._stopping.is_set():
            if not conn.pending_events():
                select.select([conn.fileno()], [], [], POLL_S)
            while conn.pending_events():
                event = conn.next_event()
                if getattr(event, "evtype", None) in RAW_EVENTS:
                    source = getattr(getattr(event, "data", None), "sourceid", None)
                    self._saw(source in xtest)

    def _saw(self, from_xtest: bool) -> None:
        if not self.attribution.is_person(from_xtest):
            return
        self._seq += 1
        self._last = time.monotonic()
        if self._loop is not None and not self._wake_pending:
            self._wake_pending = True
            self._loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        self._wake_pending = False
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()
