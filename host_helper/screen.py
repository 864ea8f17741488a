"""Screen actions on the host display: the relay's screen service, run on the helper's display.

The helper drives the real screen with the same implementation as every virtual desktop
(``relay.screen``: one worker thread per display, the keys table, the XTEST backend or the
pyautogui one, the stale-screen guard). This module only fits it to the helper's HTTP API:
one display, an unknown action is ``not_found``, and every answer names the display.
"""

from __future__ import annotations

from typing import Any

from relay.screen.service import ScreenService
from wire.errors import ErrorCode, OpError
from wire.screen_actions import SCREEN_ACTIONS


class HostScreen:
    """Runs screen actions on the helper's display, one at a time, off the event loop."""

    def __init__(self, display: str, backend: str) -> None:
        self.display = display
        self._service = ScreenService(input_backend=backend)

    async def run(self, action: str, args: dict[str, Any]) -> dict[str, Any]:
        if action not in SCREEN_ACTIONS:
            raise OpError(ErrorCode.NOT_FOUND, f"unknown screen action {action[:40]!r}")
        result = await self._service.answer(self.display, action, args)
        return {**result, "display": self.display}

    async def aclose(self) -> None:
        await self._service.aclose()
