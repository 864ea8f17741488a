"""Screen actions on the host display: the relay's screen service, run on the helper's display.

The helper drives the real screen with the same implementation as every virtual desktop
(``relay.screen``: one worker thread per display, the keys table, the XTEST backend or the
pyautogui one, the stale-screen guard). This module only fits it to the helper's HTTP API:
one display, an unknown action is ``not_found``, and every answer names the display. The apps
it denies are the helper's own and the asking relay's (``HostScreen``; docs/host-helper.md).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Final

from relay.policy import DENY_APPS_HEADER, DeniedApps, names_of
from relay.screen.service import ScreenService
from wire.errors import ErrorCode, InvalidInput, OpError
from wire.screen_actions import SCREEN_ACTIONS

MAX_RELAY_DENIED: Final = 256


def relay_denied(raw: str | None) -> DeniedApps:
    """The relay's denied apps from its request header (absent: none); a bad header is
    ``invalid_input`` naming it."""
    if raw is None:
        return DeniedApps()
    try:
        names = json.loads(raw)
    except ValueError:
        names = None
    listed = isinstance(names, list) and len(names) <= MAX_RELAY_DENIED
    if not listed or not all(isinstance(name, str) for name in names):
        raise InvalidInput(DENY_APPS_HEADER, "must be a JSON list of app names")
    return DeniedApps(frozenset(names_of(",".join(names))))


class HostScreen:
    """Runs screen actions on the helper's display, one at a time, off the event loop.

    Denied apps: the helper's own ``RELAYDESK_DENY_APPS`` (read at start) always, and besides
    them those of the relay that asks (sent with each request): a relay can add to the
    helper's setting, never lift it. A request whose relay denies other apps than the last
    one's gets a screen service made for the new set (the old one's display connections
    close)."""

    def __init__(self, display: str, backend: str, denied: DeniedApps | None = None) -> None:
        self.display = display
        self._backend = backend
        self.own = DeniedApps.from_env() if denied is None else denied
        self.denied = self.own
        self._service = ScreenService(input_backend=backend, denied=self.own)
        self._swap = asyncio.Lock()

    async def run(
        self, action: str, args: dict[str, Any], relay: DeniedApps | None = None
    ) -> dict[str, Any]:
        if action not in SCREEN_ACTIONS:
            raise OpError(ErrorCode.NOT_FOUND, f"unknown screen action {action[:40]!r}")
        service = await self._service_for(relay or DeniedApps())
        result = await service.answer(self.display, action, args)
        return {**result, "display": self.display}

    async def _service_for(self, relay: DeniedApps) -> ScreenService:
        wanted = DeniedApps(self.own.names | relay.names)
        async with self._swap:
            if wanted != self.denied:
                old = self._service
                self._service = ScreenService(input_backend=self._backend, denied=wanted)
                self.denied = wanted
                await old.aclose()
            return self._service

    async def aclose(self) -> None:
        await self._service.aclose()
