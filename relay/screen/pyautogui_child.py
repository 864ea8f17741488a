"""pyautogui's own process, for the ``pyautogui`` input backend (``pyautogui_input.py``).

Run as ``python -m relay.screen.pyautogui_child`` with the screen to drive in its environment.
It answers one line per line read: first ``{"ok": "ready"}`` or the reason pyautogui cannot
open the screen, then for each ``{"call", "args", "kwargs"}`` the pyautogui function's result
(``{"ok": …}``) or its failure (``{"error": …}``). It exits when its standard input ends.
Only the functions in :data:`CALLS` can be called.
"""

from __future__ import annotations

import importlib
import json
import sys
from typing import Any

CALLS = frozenset(
    {
        "size",
        "position",
        "moveTo",
        "click",
        "mouseDown",
        "mouseUp",
        "vscroll",
        "hscroll",
        "press",
        "hotkey",
        "keyDown",
        "keyUp",
        "isValidKey",
    }
)
# Answers go to the real standard output only: libraries print there too (python-xlib's
# "no xauthority details" warning), so everything else printed goes to standard error.
_ANSWERS = sys.stdout
sys.stdout = sys.stderr


def _reply(answer: dict[str, Any]) -> None:
    _ANSWERS.write(json.dumps(answer) + "\n")
    _ANSWERS.flush()


def _open() -> Any:
    try:
        gui: Any = importlib.import_module("pyautogui")
    except ImportError:
        _reply({"error": "the pyautogui backend is not installed"})
        return None
    except Exception as err:
        # Its X11 module connects on import (KeyError without $DISPLAY, Xlib's errors when
        # the display does not answer): a boundary, so the reason goes back whole.
        _reply({"error": f"pyautogui cannot open the screen: {type(err).__name__}: {err}"})
        return None
    gui.FAILSAFE = False  # a corner click is legitimate for an agent
    gui.PAUSE = 0  # pyautogui sleeps 0.1 s after every call by default
    return gui


def _answer(gui: Any, line: str) -> dict[str, Any]:
    try:
        request = json.loads(line)
        name, args, kwargs = request["call"], request["args"], request["kwargs"]
    except (ValueError, KeyError, TypeError):
        return {"error": "malformed call"}
    if name not in CALLS:
        return {"error": f"no call {name!r}"}
    try:
        result = getattr(gui, name)(*args, **kwargs)
    except Exception as err:
        return {"error": f"{name} failed: {type(err).__name__}: {err}"}
    return {"ok": list(result) if isinstance(result, tuple) else result}


def main() -> int:
    gui = _open()
    if gui is None:
        return 1
    _reply({"ok": "ready"})
    for line in sys.stdin:
        _reply(_answer(gui, line))
    return 0


if __name__ == "__main__":
    sys.exit(main())
