"""A small Tk window with known truths for the ``effect`` verdict: a button that changes its
own label when clicked, a text field, a label that ignores clicks, and empty space.

Run as ``python -m tests.support.effect_app X Y`` on ``$DISPLAY``: the window's top-left corner
goes to (X, Y); it prints ``ready`` once mapped. The caret does not blink (a blinking caret is
a change nobody caused); a click on the bare window takes the focus from the field. Geometry,
relative to the window: :data:`BUTTON`, :data:`FIELD`, :data:`LABEL`, :data:`EMPTY` (centres),
all inside :data:`SIZE`.
"""

from __future__ import annotations

import sys
import tkinter
from typing import Final

SIZE: Final = (420, 260)
BUTTON: Final = (70, 40)
FIELD: Final = (250, 40)
LABEL: Final = (70, 120)
EMPTY: Final = (300, 200)


def main() -> None:
    x, y = int(sys.argv[1]), int(sys.argv[2])
    root = tkinter.Tk()
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


if __name__ == "__main__":
    main()
