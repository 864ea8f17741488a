"""A small Qt 5 app for the accessibility tests, run by the system's Python in a desktop.

Usage: ``python3 a11y_qt_app.py STATE_FILE``. It shows a form ("relaydesk qt form": a Name
line edit, a "Remember me" check box, a Save push button, a status label, a "Colours" list)
and writes its state as JSON to ``STATE_FILE`` whenever it changes, so tests can check what
the app really did, independently of the tools under test. It sets nothing for accessibility:
the desktop exposes it as it exposes any Qt app (docs/accessibility.md, "Set-up").
"""

import json
import os
import sys
from typing import Any

from PyQt5.QtWidgets import (
    QApplication,
    QCheckBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QPushButton,
    QVBoxLayout,
    QWidget,
)


def main() -> None:
    state_path = sys.argv[1]
    state: dict[str, Any] = {"saved": None, "remember": False, "clicks": 0, "colour": None}

    def write() -> None:
        tmp = state_path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(state, f, ensure_ascii=False)
        os.replace(tmp, state_path)

    app = QApplication(sys.argv[:1])
    window = QWidget()
    window.setWindowTitle("relaydesk qt form")
    window.resize(420, 320)
    window.move(40, 360)
    box = QVBoxLayout(window)

    form = QFormLayout()
    entry = QLineEdit()
    form.addRow("&Name", entry)  # the label is the line edit's buddy: its accessible name
    box.addLayout(form)

    remember = QCheckBox("Remember me")

    def on_toggle(checked: bool) -> None:
        state["remember"] = checked
        write()

    remember.toggled.connect(on_toggle)
    box.addWidget(remember)

    status = QLabel("Not saved")
    save = QPushButton("Save")

    def on_save() -> None:
        state["saved"] = entry.text()
        state["clicks"] = int(state["clicks"]) + 1
        status.setText(f"Saved: {entry.text()}")
        write()

    save.clicked.connect(on_save)
    box.addWidget(save)
    box.addWidget(status)

    colours = QListWidget()
    colours.setAccessibleName("Colours")
    colours.addItems(["Red", "Green", "Blue"])

    def on_colour(row: int) -> None:
        state["colour"] = colours.item(row).text() if row >= 0 else None
        write()

    colours.currentRowChanged.connect(on_colour)
    box.addWidget(colours)

    window.show()
    write()
    sys.exit(app.exec_())


if __name__ == "__main__":
    main()
