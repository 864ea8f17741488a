"""One agent door's call: its caller, its target desktop, its session, and the typed actions it
runs there.

A call runs typed actions through the server's ``ActionRunner`` (with its door's ``source``):
the caller's role, the schemas, the takeover gate and the audit are the actions' own. A session
remembers the ``screen_revision`` of its own last screenshot, which guards its clicks, and the
desktop session of its slot, found again when the slot's desktop was restarted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, Generic, TypeVar

from server.actions.invoke import ActionRunner
from server.auth.principal import Principal
from server.doors.admission import Target
from wire.errors import ErrorCode, OpError

Result = dict[str, Any]
LISTING: Final = "desktop_list_active"
# The desktop the screen action reaches without naming one.
DEFAULT: Final = ("virtual", "main")


@dataclass
class DoorSession:
    """What a door's session remembers between calls (each may come on a new connection): the
    revision of its last screenshot, which guards its clicks, and its desktop's session id."""

    revision: str | None = None
    desktop_session_id: str | None = None


S = TypeVar("S", bound=DoorSession)


@dataclass
class DesktopCall(Generic[S]):
    """One call's caller, target and session; ``source`` names the door in the audit."""

    source: ClassVar[str]
    actions: ActionRunner
    principal: Principal
    target: Target
    session: S
    request_id: str
    steps: list[str] = field(default_factory=list)
    # The last input action's verdict: did it visibly take effect (and after how long)?
    effect: str | None = None
    effect_ms: int | None = None

    async def action(self, name: str, **args: Any) -> Result:
        """Run the typed action ``name`` on this call's desktop; ``OpError`` on refusal."""
        body = {"conversation_id": self.target.conversation_id, **self._where(name), **args}
        status, answer = await self.actions.invoke(
            self.principal, name, body, source=self.source, request_id=self.request_id
        )
        self.steps.append(name)
        if status != 200:
            raise op_error(answer)
        session_id = answer.get("desktop_session_id")
        if isinstance(session_id, str):
            self.session.desktop_session_id = session_id
        self.answered(answer)
        return answer

    def answered(self, answer: Result) -> None:
        """What a call keeps of an action's answer beyond the desktop's session: the input
        action's ``effect`` (docs/computer-use.md, "Did it take effect?")."""
        if isinstance(answer.get("effect"), str):
            ms = answer.get("effect_ms")
            self.effect, self.effect_ms = str(answer["effect"]), ms if isinstance(ms, int) else None

    def verdict(self) -> Result:
        """The last input action's ``effect`` (and ``effect_ms``) as an answer's keys."""
        if self.effect is None:
            return {}
        timed = {"effect_ms": self.effect_ms} if self.effect_ms is not None else {}
        return {"effect": self.effect, **timed}

    async def last_revision(self, stale: str) -> str:
        """The revision of the session's last screenshot, which guards its clicks. Before any
        screenshot: ``stale_screen`` saying ``stale``, after a look at the screen so that a
        caller the screen is not open to hears that first (forbidden, not_running…)."""
        if self.session.revision is None:
            await self.screen("mouse_position")
            raise OpError(ErrorCode.STALE_SCREEN, stale)
        return self.session.revision

    def _where(self, name: str) -> Result:
        """How each action names the desktop: the screen action by ``local`` (and the default
        virtual desktop), the others by kind and slot."""
        if name == "screen":
            relay = {"relay": self.target.relay}
            if self.target.kind == "local":
                return {**relay, "local": True}
            if (self.target.kind, self.target.slot) == DEFAULT:
                return relay
            return {**relay, "desktop_session_id": self.session.desktop_session_id or ""}
        if name == LISTING:  # lists every desktop of the conversation
            return {}
        return {"relay": self.target.relay, "kind": self.target.kind, "slot": self.target.slot}

    async def screen(self, action: str, **args: Any) -> Result:
        """The ``screen`` action on the target desktop (found by its slot when not the
        default one, and found again when the slot's desktop was restarted)."""
        if self.target.kind == "local" or (self.target.kind, self.target.slot) == DEFAULT:
            return await self.action("screen", action=action, **args)
        known = self.session.desktop_session_id
        if known is None:
            await self._session_of_slot()
        try:
            return await self.action("screen", action=action, **args)
        except OpError as err:
            if known is None or err.code is not ErrorCode.NOT_RUNNING:
                raise
        # The session's desktop stopped since: the slot may hold a new one.
        self.session.desktop_session_id = None
        await self._session_of_slot()
        return await self.action("screen", action=action, **args)

    async def _session_of_slot(self) -> None:
        """The running desktop in the target's slot of its relay (screen names it by session)."""
        target = self.target
        for row in (await self.action(LISTING)).get("desktops", []):
            where = (row.get("kind"), row.get("slot"), row.get("state"))
            relay_named = target.relay in (row.get("relay_id"), row.get("relay_name"))
            if relay_named and where == (target.kind, target.slot, "running"):
                self.session.desktop_session_id = str(row["desktop_session_id"])
                return
        raise OpError(ErrorCode.NOT_RUNNING, "no running desktop in that slot; start one first")


def op_error(answer: Mapping[str, Any]) -> OpError:
    """The ``OpError`` an action's refusal carries (``internal`` when it carries none)."""
    error = answer.get("error")
    if not isinstance(error, Mapping):
        return OpError(ErrorCode.INTERNAL, "internal error")
    try:
        code = ErrorCode(str(error.get("code")))
    except ValueError:
        code = ErrorCode.INTERNAL
    details = {k: v for k, v in error.items() if k not in ("code", "message")}
    return OpError(code, str(error.get("message", "")), details)
