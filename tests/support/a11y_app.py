"""A small GTK 3 app for the accessibility tests, run by the system's Python in a desktop.

Usage: ``python3 a11y_app.py STATE_FILE``. It shows a form ("relaydesk form": a Name entry, a
"Remember me" check box, a Save button, a status label, an "Open details" button that opens a
"Details" dialog with a Close button) and writes its state as JSON to ``STATE_FILE`` whenever
it changes, so tests can check what the app really did, independently of the tools under test.
"""

import json
import os
import sys
from typing import Any

import gi

gi.require_version("Gtk", "3.0")
from gi.repository import Gtk  # noqa: E402


def main() -> None:
    state_path = sys.argv[1]
    state: dict[str, Any] = {"saved": None, "remember": False, "details_open": False, "clicks": 0}

    def write() -> None:
        tmp = state_path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(state, f, ensure_ascii=False)
        os.replace(tmp, state_path)

    window = Gtk.Window(title="relaydesk form")
    window.set_default_size(420, 260)
    window.move(40, 40)
    box = Gtk.Box(orientation=Gtk.Orientation.VERTICAL, spacing=8, margin=12)
    window.add(box)

    row = Gtk.Box(spacing=8)
    label = Gtk.Label(label="Name")
    entry = Gtk.Entry()
    entry.get_accessible().set_name("Name")
    label.set_mnemonic_widget(entry)
    row.pack_start(label, False, False, 0)
    row.pack_start(entry, True, True, 0)
    box.pack_start(row, False, False, 0)

    remember = Gtk.CheckButton(label="Remember me")

    def on_toggle(button: Gtk.CheckButton) -> None:
        state["remember"] = button.get_active()
        write()

    remember.connect("toggled", on_toggle)
    box.pack_start(remember, False, False, 0)

    status = Gtk.Label(label="Not saved")
    save = Gtk.Button(label="Save")

    def on_save(_button: Gtk.Button) -> None:
        state["saved"] = entry.get_text()
        state["clicks"] = int(state["clicks"]) + 1
        status.set_text(f"Saved: {entry.get_text()}")
        write()

    save.connect("clicked", on_save)
    box.pack_start(save, False, False, 0)
    box.pack_start(status, False, False, 0)

    details = Gtk.Button(label="Open details")

    def on_details(_button: Gtk.Button) -> None:
        dialog = Gtk.Window(title="Details")
        dialog.set_default_size(240, 120)
        dialog.move(500, 80)
        close = Gtk.Button(label="Close")

        def on_close(_b: Gtk.Button) -> None:
            dialog.destroy()
            state["details_open"] = False
            write()

        close.connect("clicked", on_close)
        dialog.add(close)
        dialog.show_all()
        state["details_open"] = True
        write()

    details.connect("clicked", on_details)
    box.pack_start(details, False, False, 0)

    window.connect("destroy", Gtk.main_quit)
    window.show_all()
    write()
    Gtk.main()


if __name__ == "__main__":
    main()
