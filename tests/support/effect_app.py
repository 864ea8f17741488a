"""A small Tk window with known truths for the ``effect`` verdict: a button that changes its
own label when clicked, a text field, a label that ignores clicks, and empty space.

Run as ``python -m tests.support.effect_app X Y`` on ``$DISPLAY``: the window's top-left corner
goes to (X, Y); it prints ``ready`` once mapped. :func:`shown` runs it on a desktop with a
window manager and an X event recorder, and says where its window landed. The caret does not
blink (a blinking caret is a change nobody caused); a click on the bare window takes the focus
from the field. Geometry, relative to the window: :data:`BUTTON`, :data:`FIELD`,
:data:`LABEL`, :data:`EMPTY` (centres), all inside :data:`SIZE`.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tkinter
from collections.abc import Iterator
from typing import Final

SIZE: Final = (420, 260)
BUTTON: Final = (70, 40)
FIELD: Final = (250, 40)
LABEL: Final = (70, 120)
EMPTY: Final = (300, 200)
TITLE: Final = "relaydesk effect"


def main() -> None:
    x, y = int(sys.argv[1]), int(sys.argv[2])
    root = tkinter.Tk()
    root.title(TITLE)
    root.geometry(f"{SIZE[0]}x{SIZE[1]}+{x}+{y}")
    root.configure(background="#dddddd")
    count = tkinter.IntVar(value=0)

    def pressed() -> None:
        count.set(count.get() + 1)
        button.configure(text=f"clicked {count.get()}")

    button = tkinter.Button(root, text="press me", command=pressed, width=10)
    button.place(x=BUTTON[0], y=BUTTON[1], anchor="center")
    field = tkinter.Entry(root, width=18, insertofftime=0)
    field.place(x=FIELD[0], y=FIELD[1], anchor="center")
    label = tkinter.Label(root, text="just words", background="#dddddd")
    label.place(x=LABEL[0], y=LABEL[1], anchor="center")
    # A click on the bare window takes the focus from the field (its caret goes away there).
    root.bind("<Button-1>", lambda event: root.focus_set() if event.widget is root else None)
    root.after(200, lambda: print("ready", flush=True))
    root.mainloop()


def _origin(display_name: str) -> tuple[int, int]:
    """The top-left corner of the window's client area on the screen."""
    from Xlib import display

    conn = display.Display(display_name)
    try:
        root = conn.screen().root
        pending = list(root.query_tree().children)
        while pending:
            window = pending.pop()
            if window.get_wm_name() == TITLE:
                origin = window.translate_coords(root, 0, 0)
                return -origin.x, -origin.y
            pending.extend(window.query_tree().children)
        raise LookupError(f"no window titled {TITLE!r} on {display_name}")
    finally:
        conn.close()


def _restack(display_name: str, window_id: int, mode: int) -> None:
    from Xlib import display

    conn = display.Display(display_name)
    try:
        conn.create_resource_object("window", window_id).configure(stack_mode=mode)
        conn.sync()
    finally:
        conn.close()


@contextlib.contextmanager
def shown(display_name: str, timeout: float, cover: int) -> Iterator[tuple[int, int]]:
    """The app on ``display_name``; yields its window's origin. ``cover`` is an
    override-redirect window over the screen (an event recorder's): it goes below every
    other window meanwhile (a window manager would not raise the app above it)."""
    from Xlib import X

    env = {**os.environ, "DISPLAY": display_name}
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.support.effect_app", "100", "100"],
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    _restack(display_name, cover, X.Below)
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "ready"
        yield _origin(display_name)
    finally:
        process.terminate()
        process.wait(timeout=timeout)
        _restack(display_name, cover, X.Above)


if __name__ == "__main__":
    main()
