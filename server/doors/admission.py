"""Who calls an agent door, and which desktop: an API token, membership of the conversation
(else 404, as for one that does not exist) and a sane target (a relay name or id, a kind
``virtual``, ``docker`` or ``local``, a slot). Each door reads its token from its own headers;
the rest is the same for every door, as is the session kept per token and desktop."""

from __future__ import annotations

import hashlib
import re
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Generic, TypeVar, cast

from starlette.requests import HTTPConnection

from server.actions.registry import CONVERSATION_ID
from server.auth.dependencies import token_principal
from server.auth.errors import Unauthorized
from server.auth.principal import Principal
from server.auth.scopes import scoped_role
from server.db.records import Role
from server.db.store import Store
from wire.desktop_rows import SLOT_RE
from wire.errors import ErrorCode, InvalidArgs, OpError
from wire.ops import DesktopKind

KINDS: Final = ("virtual", "docker", "local")
# Sessions kept (one per token and desktop); the least recently used goes first.
MAX_SESSIONS: Final = 4096
_CONVERSATION_ID: Final = re.compile(CONVERSATION_ID["pattern"])
_RELAY: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


@dataclass(frozen=True)
class Target:
    """The desktop a door's URL names."""

    conversation_id: str
    relay: str
    kind: DesktopKind
    slot: str


SessionKey = tuple[str, Target]


@dataclass(frozen=True)
class Admission:
    """An admitted caller: who, their role in the conversation, which desktop, which session."""

    principal: Principal
    role: Role
    target: Target
    session_key: SessionKey


def bearer(authorization: str) -> str:
    """The token of an ``Authorization: Bearer <token>`` header."""
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("expected 'Authorization: Bearer <token>'")
    return token.strip()


def target_of(conn: HTTPConnection) -> Target:
    """The path's target desktop, or ``InvalidArgs`` naming the part that does not fit."""
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


async def admit(store: Store, conn: HTTPConnection, token: str) -> Admission:
    """The token's user and the target, or ``Unauthorized``/``InvalidArgs``/``not_found``."""
    principal = await token_principal(store, token)
    target = target_of(conn)
    role = None
    if _CONVERSATION_ID.fullmatch(target.conversation_id):
        held = await store.get_role(target.conversation_id, principal.user_id)
        role = scoped_role(principal, target.conversation_id, held)
    if role is None:
        raise OpError(ErrorCode.NOT_FOUND, "conversation not found")
    key = (hashlib.sha256(token.encode()).hexdigest(), target)
    return Admission(principal, role, target, key)


S = TypeVar("S")


class Sessions(Generic[S]):
    """One session per token and desktop; the least recently used goes first."""

    def __init__(self, new: Callable[[], S], limit: int = MAX_SESSIONS) -> None:
        self._new = new
        self._limit = limit
        self._sessions: OrderedDict[SessionKey, S] = OrderedDict()

    def of(self, admission: Admission) -> S:
        session = self._sessions.pop(admission.session_key, None)
        if session is None:
            session = self._new()
        self._sessions[admission.session_key] = session
        while len(self._sessions) > self._limit:
            self._sessions.popitem(last=False)
        return session
