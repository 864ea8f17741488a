"""One Cua command's call: its caller, its target desktop, its session, and its parameters.

A call runs typed actions through the server's ``ActionRunner`` (``source="cua"``): the
caller's role, the schemas, the takeover gate and the audit are the actions' own. A Cua session
remembers the ``screen_revision`` of its own last screenshot and guards every click with it
(:class:`CuaSession`), which Cua's client does not know about.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from server.actions.invoke import ActionRunner
from server.auth.principal import Principal
from wire.errors import ErrorCode, InvalidArgs, OpError
from wire.ops import DesktopKind

SOURCE: Final = "cua"
Result = dict[str, Any]
Handler = Callable[["CuaCall", Mapping[str, Any]], Awaitable[Result]]
# A region this size around a point is what an unguarded (``?guard=off``) click looks at: a
# fresh zoom of it gives the click a revision of its own (the relay never clicks unguarded).
OWN_LOOK_SIDE: Final = 8
MAX_SCROLL: Final = 50
LISTING: Final = "desktop_list_active"
# The desktop the screen action reaches without naming one.
DEFAULT: Final = ("virtual", "main")


@dataclass
class CuaSession:
    """What a Cua client's session remembers between its commands (each command may come on a
    new connection): the revision of its last screenshot, which guards its clicks."""

    revision: str | None = None
    desktop_session_id: str | None = None


@dataclass(frozen=True)
class CuaTarget:
    """The desktop a Cua base URL names."""

    conversation_id: str
    relay: str
    kind: DesktopKind
    slot: str


@dataclass
class CuaCall:
    """One command's caller, target and session."""

    actions: ActionRunner
    principal: Principal
    target: CuaTarget
    session: CuaSession
    request_id: str
    guard: bool = True
    steps: list[str] = field(default_factory=list)

    async def action(self, name: str, **args: Any) -> Result:
        """Run the typed action ``name`` on this call's desktop; ``OpError`` on refusal."""
        body = {"conversation_id": self.target.conversation_id, **self._where(name), **args}
        status, answer = await self.actions.invoke(
            self.principal, name, body, source=SOURCE, request_id=self.request_id
        )
        self.steps.append(name)
        if status != 200:
            raise _op_error(answer)
        session_id = answer.get("desktop_session_id")
        if isinstance(session_id, str):
            self.session.desktop_session_id = session_id
        return answer

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


def _op_error(answer: Mapping[str, Any]) -> OpError:
    error = answer.get("error")
    if not isinstance(error, Mapping):
        return OpError(ErrorCode.INTERNAL, "internal error")
    try:
        code = ErrorCode(str(error.get("code")))
    except ValueError:
        code = ErrorCode.INTERNAL
    details = {k: v for k, v in error.items() if k not in ("code", "message")}
    return OpError(code, str(error.get("message", "")), details)


# -- parameters --------------------------------------------------------------------------


def int_param(params: Mapping[str, Any], name: str) -> int:
    value = params.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgs(name, "must be a number")
    return int(value)


def optional_point(params: Mapping[str, Any]) -> tuple[int, int] | None:
    if params.get("x") is None and params.get("y") is None:
        return None
    return int_param(params, "x"), int_param(params, "y")


def str_param(params: Mapping[str, Any], name: str) -> str:
    value = params.get(name)
    if not isinstance(value, str):
        raise InvalidArgs(name, "must be a string")
    return value


def button_param(params: Mapping[str, Any]) -> str:
    button = params.get("button", "left")
    if button not in ("left", "middle", "right"):
        raise InvalidArgs("button", "must be left, middle or right")
    return str(button)
