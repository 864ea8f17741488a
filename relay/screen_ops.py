"""The relay's ``screen.<action>`` ops: find the desktop's display, run the action there.

The server names a desktop by ``desktop_session_id`` (default: the running ``virtual``
desktop in slot ``main``); this module resolves it to its X display from the desktop manager's
rows and calls :class:`relay.screen.service.ScreenService`. Guarded actions may carry a
``revision_target`` (the desktop session and display the screenshot was taken on): the target
must still be exactly that one, or the action is refused before any input.

A screenshot result carries ``capture``: where the row bands of its PNG start (``wire.capture``),
so the server keeps the PNG itself as the full-resolution capture behind the revision; a JPEG
or WebP screenshot carries that lossless PNG as well.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from relay.screen.service import ScreenService
from wire.errors import ErrorCode, InvalidArgs, OpError
from wire.screen_actions import SCREEN_ACTIONS

if TYPE_CHECKING:
    from relay.link import ServerLink

logger = logging.getLogger(__name__)

OP_PREFIX = "screen."
DEFAULT_KIND, DEFAULT_SLOT = "virtual", "main"
# Arguments meant for this module, never passed on to the screen service.
_ROUTING_ARGS = ("desktop_session_id", "revision_target")

OpHandler = Callable[["ServerLink", dict[str, Any]], Awaitable[Any]]


class DesktopRows(Protocol):
    """What the screen ops need of the desktop manager."""

    async def status(self) -> list[dict[str, Any]]: ...

    async def running(
        self, desktop_session_id: str | None, default: tuple[str, str]
    ) -> dict[str, Any] | None: ...

    def displays(self) -> set[str]: ...


class ScreenOps:
    """Handlers for ``screen.<action>``, one per action of the screen service."""

    def __init__(self, desktops: DesktopRows | None, service: ScreenService) -> None:
        self.desktops = desktops
        self.service = service
        self._displays: set[str] = set()

    def table(self) -> dict[str, OpHandler]:
        """``op name → handler`` for merging into the relay's op table."""
        return {f"{OP_PREFIX}{action}": self._handler(action) for action in SCREEN_ACTIONS}

    def _handler(self, action: str) -> OpHandler:
        async def handle(link: ServerLink, args: dict[str, Any]) -> dict[str, Any]:
            return await self.run(action, args)

        return handle

    async def run(self, action: str, args: dict[str, Any]) -> dict[str, Any]:
        """Resolve the target desktop and run ``action`` on its display."""
        if not isinstance(args, dict):
            raise InvalidArgs("args", "must be an object")
        row = await self._target(args.get("desktop_session_id"))
        _check_revision_target(args.get("revision_target"), row)
        display = str(row["display"])
        session_id = str(row["desktop_session_id"])
        service_args = {k: v for k, v in args.items() if k not in _ROUTING_ARGS}
        self._displays.add(display)
        await self.service.bind(display, session_id)
        try:
            result = await self.service.answer(display, action, service_args)
        except OpError as err:
            if err.code is ErrorCode.UNAVAILABLE:
                await self._explain_unavailable(session_id, err)
            raise
        return {**result, "desktop_session_id": session_id, "display": display}

    async def _target(self, session_id: object) -> dict[str, Any]:
        """The running desktop named by ``session_id``, or the default one."""
        if session_id is not None and (not isinstance(session_id, str) or not session_id):
            raise InvalidArgs("desktop_session_id", "must be a non-empty string")
        row = None
        if self.desktops is not None:
            row = await self.desktops.running(session_id, (DEFAULT_KIND, DEFAULT_SLOT))
            await self._release_gone(self.desktops.displays())
        if row is not None and row.get("state", "running") == "running" and row.get("display"):
            return row
        if session_id is None:
            raise OpError(
                ErrorCode.NOT_RUNNING, "no virtual desktop is running in slot 'main' on this relay"
            )
        raise OpError(ErrorCode.NOT_RUNNING, "this desktop session is not running")

    async def _release_gone(self, live: set[str]) -> None:
        """Close screen connections of displays whose desktops are gone."""
        for display in sorted(self._displays - live):
            self._displays.discard(display)
            await self.service.release_display(display)

    async def _explain_unavailable(self, session_id: str, err: OpError) -> None:
        """A display that failed because its desktop stopped is ``not_running``."""
        rows = await self.desktops.status() if self.desktops is not None else []
        if not any(row.get("desktop_session_id") == session_id for row in rows):
            raise OpError(ErrorCode.NOT_RUNNING, "the desktop stopped") from err


def _check_revision_target(target: object, row: dict[str, Any]) -> None:
    """The screenshot's desktop session and display must be the target's."""
    if target is None:
        return
    if not isinstance(target, dict):
        raise InvalidArgs("revision_target", "must be {desktop_session_id, display}")
    expected = (target.get("desktop_session_id"), target.get("display"))
    if expected != (row.get("desktop_session_id"), row.get("display")):
        raise OpError(
            ErrorCode.REVISION_MISMATCH,
            "the screen revision belongs to another desktop than the one this action targets",
        )
