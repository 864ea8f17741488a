"""A GTK 3 text editor for the paste tests, run by the system's Python in a desktop.

Usage: ``python3 text_app.py STATE_FILE``. One full-screen text view (GTK's own Ctrl+V, Ctrl+A
and selection handling, as in the desktop's editor); after every change of its text the app
writes ``{"text": …, "changes": n}`` as JSON to ``STATE_FILE``, so tests read what the app
really holds, independently of the viewer under test.
"""

import json
import os
import sys

import gi

gi.require_version("Gtk", "3.0")
from gi.repository import Gtk  # noqa: E402


def main() -> None:
    state_path = sys.argv[1]
    changes = 0
    window = Gtk.Window(title="relaydesk paste editor")
    window.set_default_size(1280, 800)
    window.move(0, 0)
    view = Gtk.TextView()
    buffer = view.get_buffer()

    def write(_buffer: Gtk.TextBuffer) -> None:
        nonlocal changes
        changes += 1
        text = buffer.get_text(buffer.get_start_iter(), buffer.get_end_iter(), True)
        tmp = state_path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"text": text, "changes": changes}, f)
        os.replace(tmp, state_path)

    buffer.connect("changed", write)
    window.add(view)
    window.connect("destroy", Gtk.main_quit)
    window.show_all()
    view.grab_focus()
    write(buffer)
    Gtk.main()


if __name__ == "__main__":
    main()
