"""``desktop.a11y`` on the relay: a call to the desktop's worker, then what the worker cannot do.

The worker reads the tree and performs native actions. When an element has no native action
for what was asked (or it failed), the worker answers with the element's *live* bounds and the
relay performs physical input there through the one screen stack (``relay/screen``), if this
relay allows physical input for that kind of desktop; typed text is then read back through the
element's Text interface. Launching an app waits until its window is on the accessibility bus.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import TYPE_CHECKING, Any, Final, Protocol, cast

from relay.a11y.settings import A11ySettings
from wire.errors import ErrorCode, OpError
from wire.ops import DesktopKind, RelayRow, ScreenResult
from wire.screen_actions import ScreenAction

if TYPE_CHECKING:
    from relay.a11y.client import A11yCaller

log = logging.getLogger(__name__)

# How long a call may take in the worker, beyond a ``wait``'s own timeout.
CALL_TIMEOUT_S: Final[dict[str, float]] = {
    "apps": 10.0,
    "observe": 20.0,
    "find": 20.0,
    "read": 10.0,
    "act": 10.0,
    "text": 10.0,
}
LAUNCH_POLL_S: Final = 0.2
# Typed text shows in an app's tree shortly after its key events: read back this long.
CONFIRM_S: Final = 3.0
CONFIRM_POLL_S: Final = 0.05


class A11yBackend(Protocol):
    """What this service needs of a desktop backend (``relay/backend.py``, which every backend
    follows): its kind, the desktop's worker, and the screen stack for physical input."""

    @property
    def kind(self) -> DesktopKind: ...

    async def a11y_worker(self, row: RelayRow) -> A11yCaller: ...

    async def screen(
        self, row: RelayRow, action: ScreenAction, args: dict[str, Any]
    ) -> ScreenResult: ...


class A11yService:
    """Accessibility calls on any backend's desktops, with this relay's policy."""

    def __init__(self, settings: A11ySettings) -> None:
        self.settings = settings

    async def call(
        self, backend: A11yBackend, row: RelayRow, call: str, params: dict[str, Any]
    ) -> dict[str, Any]:
        worker = await backend.a11y_worker(row)
        timeout = CALL_TIMEOUT_S.get(call, 10.0)
        if call == "wait":
            timeout = float(params.get("timeout_ms", 5000)) / 1000 + 2.0
        result = await worker.call(call, params, timeout)
        physical = result.pop("physical", None)
        if call != "act" or physical is None:
            return result
        if not params.get("physical", True) or not self.settings.physical_allowed(backend.kind):
            raise OpError(
                ErrorCode.POLICY_DENIED,
                f"{result.get('reason', 'no native action')}, and physical input is not "
                f"allowed here",
                {
                    "suggestion": "pick an element with a native action, or ask the relay's "
                    "operator to allow physical input (RELAYDESK_A11Y_PHYSICAL)"
                },
            )
        screen = await self._physical(backend, row, cast(dict[str, Any], physical))
        result |= {k: v for k, v in screen.items() if k in ("effect", "effect_ms")}
        if physical.get("action") == "type":
            result |= await self._confirm_text(worker, params["ref"], physical)
            if result["confirmed"]:  # the element's own text says so
                result["effect"] = "changed"
        result["at"] = {"x": physical["x"], "y": physical["y"]}
        return result

    async def _confirm_text(
        self, worker: A11yCaller, ref: str, physical: dict[str, Any]
    ) -> dict[str, Any]:
        """Read typed text back through the element's Text interface; apps update their
        trees after the key events, so it is read until it shows or ``CONFIRM_S`` passes."""
        expected = str(physical.get("text", ""))
        deadline = time.monotonic() + CONFIRM_S
        while True:
            read = await worker.call("text", {"ref": ref}, CALL_TIMEOUT_S["text"])
            text = str(read.get("text") or "")
            confirmed = text == expected if physical.get("replace") else expected in text
            if confirmed or time.monotonic() >= deadline:
                return {"text": read.get("text"), "confirmed": confirmed}
            await asyncio.sleep(CONFIRM_POLL_S)

    async def _physical(
        self, backend: A11yBackend, row: RelayRow, physical: dict[str, Any]
    ) -> ScreenResult:
        """Input at the live bounds the worker just read (no screenshot guard: nothing was
        chosen on a picture); the answer of its last screen action (with its ``effect``)."""
        # Here, not at the top: the screen stack loads with its first use, not at relay start.
        from relay.screen.service import LIVE_BOUNDS

        action, at = physical["action"], {"x": physical["x"], "y": physical["y"]}
        if action == "click":
            return await backend.screen(
                row, "click", {**at, "button": "left", "guard": LIVE_BOUNDS}
            )
        if action == "scroll":
            return await backend.screen(
                row,
                "scroll",
                {**at, "direction": physical["direction"], "amount": physical["amount"]},
            )
        if action not in ("type", "key"):
            raise OpError(ErrorCode.ACTION_FAILED, f"unknown physical action {action!r}")
        if not physical.get("focused"):
            await backend.screen(row, "click", {**at, "button": "left", "guard": LIVE_BOUNDS})
        if action == "key":
            return await backend.screen(row, "key", {"keys": physical["keys"]})
        if physical.get("replace"):
            await backend.screen(row, "key", {"keys": "ctrl+a"})
            await backend.screen(row, "key", {"keys": "BackSpace"})
        return await backend.screen(row, "type", {"text": physical["text"]})

    async def launched_window(
        self, backend: A11yBackend, row: RelayRow, pid: int, wait_s: float
    ) -> dict[str, Any]:
        """The app started as process group ``pid``, once its window is on the accessibility
        bus; ``timeout`` after ``wait_s``."""
        deadline = time.monotonic() + wait_s
        worker = await backend.a11y_worker(row)
        while True:
            listed = await worker.call("apps", {}, CALL_TIMEOUT_S["apps"])
            for app in listed.get("apps", []):
                if _in_group(app.get("pid"), pid) and app.get("windows"):
                    return cast(dict[str, Any], app)
            if time.monotonic() >= deadline:
                raise OpError(
                    ErrorCode.TIMEOUT,
                    f"the app started, but no window of it reached the accessibility bus "
                    f"within {wait_s:g} s",
                    {
                        "suggestion": "take a screenshot to see it; some apps (xterm) expose no "
                        "accessibility tree"
                    },
                )
            await asyncio.sleep(LAUNCH_POLL_S)


def _in_group(pid: object, group: int) -> bool:
    if not isinstance(pid, int):
        return False
    if pid == group:
        return True
    try:
        return os.getpgid(pid) == group
    except OSError:
        return False
