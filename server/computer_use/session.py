"""Who calls a computer-use door, which desktop, and what their session remembers.

A request is admitted as every agent door admits one (:mod:`server.doors.admission`): an API
token (``Authorization: Bearer rdk_…``), membership of the conversation (else 404, as for one
that does not exist) and a sane target. A session (token and desktop) remembers the
``screen_revision`` of its last screenshot and guards every click and drag with it, which the
model does not know about. Each call runs typed actions through the server's ``ActionRunner``
(``source="computer_use"``): the caller's role, the schemas, the takeover gate and the audit
are the actions' own.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, ClassVar, Final

from starlette.requests import HTTPConnection

from server.auth.errors import Unauthorized
from server.computer_use.display import Display, display_for, parse_size
from server.control.approvals import Check, SafetyApprovals, Where
from server.db.store import Store
from server.doors.admission import Admission, bearer
from server.doors.admission import admit as admit_token
from server.doors.call import DesktopCall, DoorSession
from wire.errors import ErrorCode, OpError

SOURCE: Final = "computer_use"
Result = dict[str, Any]


@dataclass
class Session(DoorSession):
    """What a session remembers between tool calls: its last screenshot's revision (the guard
    of its clicks), the desktop's session id and the screen's size."""

    screen: tuple[int, int] | None = None


@dataclass(frozen=True)
class Admitted(Admission):
    declared: tuple[int, int] | None


def _token(conn: HTTPConnection) -> str:
    authorization = conn.headers.get("authorization")
    if authorization is None:
        raise Unauthorized("this endpoint takes an API token: 'Authorization: Bearer rdk_…'")
    return bearer(authorization)


async def admit(store: Store, conn: HTTPConnection) -> Admitted:
    """The caller and the target, or ``Unauthorized``/``InvalidArgs``/``not_found``."""
    token = _token(conn)
    declared = parse_size(conn.query_params.get("display"))
    admitted = await admit_token(store, conn, token)
    return Admitted(
        admitted.principal, admitted.role, admitted.target, admitted.session_key, declared
    )


@dataclass
class DoorCall(DesktopCall[Session]):
    """One tool call's caller, target, session and declared display."""

    source: ClassVar[str] = SOURCE
    declared: tuple[int, int] | None = None
    approvals: SafetyApprovals | None = None

    async def approved(self, checks: list[Check], call_id: str | None) -> None:
        """Nothing when a person approved ``checks`` for this agent on this desktop, else
        ``approval_required`` (a person is asked) or ``policy_denied``."""
        if self.approvals is None:
            raise OpError(ErrorCode.APPROVAL_REQUIRED, "safety checks cannot be approved here")
        await self.screen("mouse_position")  # a caller the screen is not open to hears that
        target = self.target
        where = Where(target.conversation_id, target.relay, target.kind, target.slot)
        principal = self.principal
        await self.approvals.settle(where, principal.user_id, principal.username, checks, call_id)

    async def display(self) -> Display:
        """The display this request declared (or the default) over the desktop's screen."""
        if self.session.screen is None:
            size = await self.screen("screen_size")
            self.session.screen = (int(size["width"]), int(size["height"]))
        return display_for(self.session.screen, self.declared)

    async def guard_revision(self) -> str:
        """The session's last screenshot's revision; ``stale_screen`` before any screenshot."""
        return await self.last_revision(
            "no screenshot in this session yet: take a screenshot, then act on it"
        )

    async def holding(self, keys: list[str], act: Callable[[], Awaitable[Any]]) -> None:
        """``act`` with ``keys`` held down, released whatever happens; the call's ``effect``
        is the act's, not the releases'."""
        pressed: list[str] = []
        try:
            for key in keys:
                await self.screen("key_down", key=key)
                pressed.append(key)
            self.effect = self.effect_ms = None
            await act()
        finally:
            verdict = self.effect, self.effect_ms
            for key in reversed(pressed):
                await self.screen("key_up", key=key)
            self.effect, self.effect_ms = verdict
