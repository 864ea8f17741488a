"""An X client that records input events, and the test-side handle that drives it.

Run as a script on a test display (``python xrecorder.py --display :5``): it maps a
full-screen override-redirect window, takes the input focus, prints ``{"type": "ready",
"window": id}`` once mapped, then one JSON line per ButtonPress/ButtonRelease/KeyPress/
KeyRelease/MotionNotify. A ClientMessage sent by the test is echoed as ``{"type":
"sentinel", "n": n}``: since the screen service syncs after every action, every event an
action caused is printed before the sentinel that follows it, so "no events" is checked
without sleeping.

The script part imports only the standard library and python-xlib.
"""

from __future__ import annotations

import argparse
import json
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from Xlib import X, display
from Xlib.protocol import event as xevent

SENTINEL_ATOM = "RELAYDESK_TEST_SENTINEL"
BACKGROUND = 0x336699


def _emit(record: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def _char_of(disp: display.Display, keysym: int) -> str | None:
    text: str | None = disp.lookup_string(keysym)
    if text:
        return text
    if 0x20 <= keysym <= 0xFF:
        return chr(keysym)
    if keysym & 0xFF000000 == 0x01000000:
        return chr(keysym & 0x00FFFFFF)
    return None


def _key_record(disp: display.Display, ev: Any) -> dict[str, Any]:
    index = 1 if ev.state & X.ShiftMask else 0
    keysym = disp.keycode_to_keysym(ev.detail, index) or disp.keycode_to_keysym(ev.detail, 0)
    return {
        "keycode": ev.detail,
        "keysym": keysym,
        "state": ev.state,
        "char": _char_of(disp, keysym),
        "x": ev.root_x,
        "y": ev.root_y,
    }


def _pointer_record(ev: Any) -> dict[str, Any]:
    return {"button": ev.detail, "x": ev.root_x, "y": ev.root_y, "state": ev.state}


_NAMES = {
    X.KeyPress: "KeyPress",
    X.KeyRelease: "KeyRelease",
    X.ButtonPress: "ButtonPress",
    X.ButtonRelease: "ButtonRelease",
    X.MotionNotify: "MotionNotify",
}


def record(display_name: str, width: int | None, height: int | None) -> None:
    """Map the recording window and print events forever (the test kills us)."""
    disp = display.Display(display_name)
    screen = disp.screen()
    sentinel = disp.intern_atom(SENTINEL_ATOM)
    window = screen.root.create_window(
        0,
        0,
        width or screen.width_in_pixels,
        height or screen.height_in_pixels,
        0,
        screen.root_depth,
        X.InputOutput,
        X.CopyFromParent,
        background_pixel=BACKGROUND,
        override_redirect=True,
        event_mask=(
            X.ButtonPressMask
            | X.ButtonReleaseMask
            | X.KeyPressMask
            | X.KeyReleaseMask
            | X.PointerMotionMask
            | X.StructureNotifyMask
        ),
    )
    window.map()
    while True:
        ev = disp.next_event()
        if ev.type == X.MappingNotify:
            disp.refresh_keyboard_mapping(ev)
        elif ev.type == X.MapNotify and not getattr(record, "ready", False):
            window.set_input_focus(X.RevertToParent, X.CurrentTime)
            disp.sync()
            record.ready = True  # type: ignore[attr-defined]
            _emit({"type": "ready", "window": window.id})
        elif ev.type in (X.KeyPress, X.KeyRelease):
            _emit({"type": _NAMES[ev.type], **_key_record(disp, ev)})
        elif ev.type in _NAMES:
            _emit({"type": _NAMES[ev.type], **_pointer_record(ev)})
        elif ev.type == X.ClientMessage and ev.client_type == sentinel:
            _emit({"type": "sentinel", "n": ev.data[1][1]})


class XRecorder:
    """Test-side handle: starts the recorder, reads its events, stops it by pid."""

    def __init__(self, display_name: str, timeout: float) -> None:
        self.display_name = display_name
        self.timeout = timeout
        script = str(Path(__file__).resolve())
        self.process = subprocess.Popen(
            [sys.executable, script, "--display", display_name],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self._lines: queue.Queue[str] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._conn = display.Display(display_name)
        self._sentinels = 0
        ready = self.next_event()
        if ready.get("type") != "ready":
            raise RuntimeError(f"recorder did not get ready: {ready}")
        self.window_id = int(ready["window"])

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            # python-xlib prints a warning line of its own to stdout when the authority file
            # has no entry for the display; only our JSON records are events.
            if line.startswith("{"):
                self._lines.put(line)

    def next_event(self) -> dict[str, Any]:
        try:
            line = self._lines.get(timeout=self.timeout)
        except queue.Empty:
            raise TimeoutError(f"no event from the recorder within {self.timeout:.1f} s") from None
        result: dict[str, Any] = json.loads(line)
        return result

    def drain(self) -> list[dict[str, Any]]:
        """All events up to a fresh sentinel (i.e. everything caused so far)."""
        self._sentinels += 1
        window = self._conn.create_resource_object("window", self.window_id)
        data = (32, [0, self._sentinels, 0, 0, 0])
        message = xevent.ClientMessage(
            window=window, client_type=self._conn.intern_atom(SENTINEL_ATOM), data=data
        )
        window.send_event(message, event_mask=0, propagate=False)
        self._conn.sync()
        events = []
        while (ev := self.next_event()).get("type") != "sentinel" or ev["n"] != self._sentinels:
            events.append(ev)
        return events

    def paint(self, x: int, y: int, width: int, height: int, rgb: int) -> None:
        """Fill a rectangle of the recorder window (changes pixels, not event delivery)."""
        window = self._conn.create_resource_object("window", self.window_id)
        gc = window.create_gc(foreground=rgb)
        window.fill_rectangle(gc, x, y, width, height)
        gc.free()
        self._conn.sync()

    def stop(self) -> None:
        self._conn.close()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=self.timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=self.timeout)
        if self.process.stdout is not None:
            self.process.stdout.close()
        self._reader.join(timeout=self.timeout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--display", required=True)
    parser.add_argument("--width", type=int)
    parser.add_argument("--height", type=int)
    options = parser.parse_args()
    record(options.display, options.width, options.height)


if __name__ == "__main__":
    main()
