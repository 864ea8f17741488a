"""A desktop backend's displays on the screen service: bound on first use, answers tagged
with their desktop, held input released, connections closed once their desktop is gone.

The virtual and the docker backends differ only in how they know a desktop still runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from relay.policy import DeniedApps
from wire.errors import ErrorCode, OpError
from wire.ops import KeyboardState, RelayRow, ScreenResult
from wire.screen_actions import ScreenAction

if TYPE_CHECKING:
    from relay.screen.service import ScreenService


class SharedScreenService:
    """The relay's one screen service, made by the first screen action: python-xlib, Pillow
    and the capture encoder load then, not while the relay starts and dials its server.

    ``denied``: the relay's denied apps, from its settings (``RelaySettings.tools.denied``),
    given to the service explicitly: nothing here reads the process's environment, so every
    screen of the relay follows the relay's one setting (None: no app is denied)."""

    def __init__(self, denied: DeniedApps | None = None) -> None:
        self._service: ScreenService | None = None
        self.denied = denied if denied is not None else DeniedApps()

    def __call__(self) -> ScreenService:
        if self._service is None:
            from relay.screen.service import ScreenService

            self._service = ScreenService(denied=self.denied)
        return self._service

    async def aclose(self) -> None:
        """Close the service's display connections, if it was ever made."""
        if self._service is not None:
            service, self._service = self._service, None
            await service.aclose()


class DesktopScreens:
    """``service``: the screen service (looked up at each use, so it may be made lazily);
    ``holds``: whether a desktop session still runs."""

    def __init__(self, service: Callable[[], ScreenService], holds: Callable[[str], bool]) -> None:
        self._service = service
        self._holds = holds
        self._displays: set[str] = set()

    async def _bound(self, row: RelayRow) -> str:
        display = row.get("display")
        if not isinstance(display, str):
            raise OpError(ErrorCode.UNAVAILABLE, "this desktop has no display to read")
        self._displays.add(display)
        await self._service().bind(display, row["desktop_session_id"])
        return display

    async def screen(
        self, row: RelayRow, action: ScreenAction, args: dict[str, Any]
    ) -> ScreenResult:
        display = await self._bound(row)
        session_id = row["desktop_session_id"]
        try:
            result = await self._service().answer(display, action, args)
        except OpError as err:
            if err.code is ErrorCode.UNAVAILABLE and not self._holds(session_id):
                # The display failed because its desktop stopped.
                raise OpError(ErrorCode.NOT_RUNNING, "the desktop stopped") from err
            raise
        return cast(ScreenResult, {**result, "desktop_session_id": session_id, "display": display})

    async def keyboard_state(self, row: RelayRow) -> KeyboardState:
        display = await self._bound(row)
        return cast(KeyboardState, await self._service().run(display, "keyboard_state", {}))

    async def release_held(self, row: RelayRow) -> bool:
        display = row.get("display")
        if isinstance(display, str) and display in self._displays:
            await self._service().release_held(display)
        return True

    async def release_gone(self, live: set[str]) -> None:
        """Close the connections of displays not in ``live`` (their desktops are gone)."""
        for display in sorted(self._displays - live):
            self._displays.discard(display)
            await self._service().release_display(display)
