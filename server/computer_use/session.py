"""Who calls a computer-use door, which desktop, and what their session remembers.

A request is admitted as the Cua door admits one: an API token (``Authorization: Bearer rdk_…``),
membership of the conversation (else 404, as for one that does not exist) and a sane target.
A session (token and desktop) remembers the ``screen_revision`` of its last screenshot and guards
every click and drag with it, which the model does not know about. Each call runs typed actions
through the server's ``ActionRunner`` (``source="computer_use"``): the caller's role, the
schemas, the takeover gate and the audit are the actions' own.
"""

from __future__ import annotations

import hashlib
import re
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Final, cast

from starlette.requests import HTTPConnection

from server.actions.invoke import ActionRunner
from server.actions.registry import CONVERSATION_ID
from server.auth.errors import Unauthorized
from server.auth.principal import Principal
from server.computer_use.display import Display, display_for, parse_size
from server.db.records import Role
from server.db.store import Store
from server.secrets.tokens import hash_secret
from wire.desktop_rows import SLOT_RE
from wire.errors import ErrorCode, InvalidArgs, OpError
from wire.ops import DesktopKind

SOURCE: Final = "computer_use"
KINDS: Final = ("virtual", "docker", "local")
MAX_SESSIONS: Final = 4096
LISTING: Final = "desktop_list_active"
DEFAULT: Final = ("virtual", "main")
_CONVERSATION_ID: Final = re.compile(CONVERSATION_ID["pattern"])
_RELAY: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
Result = dict[str, Any]


@dataclass(frozen=True)
class Target:
    """The desktop a door's URL names."""

    conversation_id: str
    relay: str
    kind: DesktopKind
    slot: str


@dataclass
class Session:
    """What a session remembers between tool calls: its last screenshot's revision (the guard
    of its clicks), the desktop's session id and the screen's size."""

    revision: str | None = None
    desktop_session_id: str | None = None
    screen: tuple[int, int] | None = None


@dataclass(frozen=True)
class Admitted:
    principal: Principal
    role: Role
    target: Target
    session_key: tuple[str, Target]
    declared: tuple[int, int] | None


def _token(conn: HTTPConnection) -> str:
    authorization = conn.headers.get("authorization")
    if authorization is None:
        raise Unauthorized("this endpoint takes an API token: 'Authorization: Bearer rdk_…'")
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("expected 'Authorization: Bearer <token>'")
    return token.strip()


def _target(conn: HTTPConnection) -> Target:
    params = conn.path_params
    conversation_id, relay = str(params["conversation_id"]), str(params["relay"])
    kind, slot = str(params["kind"]), str(params["slot"])
    if not _RELAY.fullmatch(relay):
        raise InvalidArgs("relay", "must be a relay name or id")
    if kind not in KINDS:
        raise InvalidArgs("kind", "must be virtual, docker or local")
    if not SLOT_RE.fullmatch(slot):
        raise InvalidArgs("slot", "must be a slot name like 'main'")
    return Target(conversation_id, relay, cast("DesktopKind", kind), slot)


async def admit(store: Store, conn: HTTPConnection) -> Admitted:
    """The caller and the target, or ``Unauthorized``/``InvalidArgs``/``not_found``."""
    token = _token(conn)
    declared = parse_size(conn.query_params.get("display"))
    user = await store.authenticate_api_token(token)
    if user is None:
        raise Unauthorized("invalid or revoked token")
    principal = Principal(
        user.user_id, user.username, user.is_admin, "token", None, hash_secret(token)
    )
    target = _target(conn)
    role = None
    if _CONVERSATION_ID.fullmatch(target.conversation_id):
        role = await store.get_role(target.conversation_id, principal.user_id)
    if role is None:
        raise OpError(ErrorCode.NOT_FOUND, "conversation not found")
    key = (hashlib.sha256(token.encode()).hexdigest(), target)
    return Admitted(principal, role, target, key, declared)


class Sessions:
    """One session per token and desktop; the least recently used goes first."""

    def __init__(self, limit: int = MAX_SESSIONS) -> None:
        self._limit = limit
        self._sessions: OrderedDict[tuple[str, Target], Session] = OrderedDict()

    def of(self, admitted: Admitted) -> Session:
        session = self._sessions.pop(admitted.session_key, None) or Session()
        self._sessions[admitted.session_key] = session
        while len(self._sessions) > self._limit:
            self._sessions.popitem(last=False)
        return session


@dataclass
class DoorCall:
    """One tool call's caller, target and session."""

    actions: ActionRunner
    admitted: Admitted
    session: Session
    request_id: str
    steps: list[str] = field(default_factory=list)
    # The last input action's verdict: did it visibly take effect (and after how long)?
    effect: str | None = None
    effect_ms: int | None = None

    @property
    def target(self) -> Target:
        return self.admitted.target

    async def action(self, name: str, **args: Any) -> Result:
        """Run the typed action ``name`` on this call's desktop; ``OpError`` on refusal."""
        body = {"conversation_id": self.target.conversation_id, **self._where(name), **args}
        status, answer = await self.actions.invoke(
            self.admitted.principal, name, body, source=SOURCE, request_id=self.request_id
        )
        self.steps.append(name)
        if status != 200:
            raise op_error(answer)
        session_id = answer.get("desktop_session_id")
        if isinstance(session_id, str):
            self.session.desktop_session_id = session_id
        if isinstance(answer.get("effect"), str):
            self.effect, self.effect_ms = str(answer["effect"]), answer.get("effect_ms")
        return answer

    def _where(self, name: str) -> Result:
        if name == "screen":
            relay = {"relay": self.target.relay}
            if self.target.kind == "local":
                return {**relay, "local": True}
            if (self.target.kind, self.target.slot) == DEFAULT:
                return relay
            return {**relay, "desktop_session_id": self.session.desktop_session_id or ""}
        if name == LISTING:
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
        self.session.desktop_session_id = None
        await self._session_of_slot()
        return await self.action("screen", action=action, **args)

    async def _session_of_slot(self) -> None:
        target = self.target
        for row in (await self.action(LISTING)).get("desktops", []):
            where = (row.get("kind"), row.get("slot"), row.get("state"))
            relay_named = target.relay in (row.get("relay_id"), row.get("relay_name"))
            if relay_named and where == (target.kind, target.slot, "running"):
                self.session.desktop_session_id = str(row["desktop_session_id"])
                return
        raise OpError(ErrorCode.NOT_RUNNING, "no running desktop in that slot; start one first")

    async def display(self) -> Display:
        """The display this request declared (or the default) over the desktop's screen."""
        if self.session.screen is None:
            size = await self.screen("screen_size")
            self.session.screen = (int(size["width"]), int(size["height"]))
        return display_for(self.session.screen, self.admitted.declared)

    def guard_revision(self) -> str:
        """The session's last screenshot's revision; ``stale_screen`` before any screenshot."""
        if self.session.revision is None:
            raise OpError(
                ErrorCode.STALE_SCREEN,
                "no screenshot in this session yet: take a screenshot, then act on it",
            )
        return self.session.revision


def op_error(answer: Result) -> OpError:
    error = answer.get("error")
    if not isinstance(error, dict):
        return OpError(ErrorCode.INTERNAL, "internal error")
    try:
        code = ErrorCode(str(error.get("code")))
    except ValueError:
        code = ErrorCode.INTERNAL
    details = {k: v for k, v in error.items() if k not in ("code", "message")}
    return OpError(code, str(error.get("message", "")), details)
