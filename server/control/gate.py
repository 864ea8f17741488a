"""The gate every agent input passes before any input event: ``admit_agent_input``.

Input paths (the screen tool's input actions, accessibility acts, …) call, with the action's
context and the desktop it acts on::

    target = await resolve_target(ctx, desktop_session_id=..., kind=..., slot=...)
    async with agent_input(ctx, target, window_id=None) as grant:
        ...send the input...
        grant.acted("click", x=..., y=...)

``agent_input`` marks the request in flight first (so Stop ends it even during admission),
then admits it: ``OpError`` ``takeover_active`` (a person holds the desktop),
``stopped_by_user`` (a person stopped this agent: no grant during the cooldown), or
``stale_screen`` (the agent's window grant covers another window). When Stop reaches the
request while it runs, the request is cancelled and ``stopped_by_user`` comes out of the
``async with``. Paths that admit and run in separate steps use :func:`admit_agent_input` and
``AgentGrant.in_flight()``.

Who is an agent: every caller with an API token (``Principal.via == "token"``). Only a person
(a cookie session) takes control, hands back or presses Stop (:func:`require_person`), and
what changes a desktop's life — starting one, launching an app in it, stopping it — passes the
gate for an agent and not for a person (:func:`agent_act`, :func:`admit_agent_place`).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from server.auth.principal import Principal
from server.control.audit import AuditContext
from server.control.model import AgentRequest, DesktopKey, Grant, GrantScope, place_key
from server.db.records import RelayRecord
from server.db.rows import DesktopRow
from server.db.store import Store
from wire.errors import ErrorCode, InvalidArgs, OpError
from wire.ids import RelayId
from wire.ops import DesktopKind

if TYPE_CHECKING:
    from server.control.service import ControlService


class GateParts(Protocol):
    """What the gate uses of the server's parts."""

    @property
    def control(self) -> ControlService: ...


class GateContext(Protocol):
    """What the gate reads of an action call (``server.actions.context.ActionContext``)."""

    conversation_id: str
    source: str
    request_id: str
    relay: RelayRecord | None

    @property
    def principal(self) -> Principal: ...

    @property
    def parts(self) -> GateParts: ...

    @property
    def store(self) -> Store: ...

    @property
    def relay_id(self) -> RelayId: ...


@dataclass(frozen=True)
class DesktopTarget:
    """The desktop an input acts on, as the inventory names it."""

    relay_id: str
    kind: DesktopKind
    slot: str
    desktop_session_id: str

    @property
    def key(self) -> DesktopKey:
        return DesktopKey(self.relay_id, self.desktop_session_id)

    @property
    def place(self) -> DesktopKey:
        """Where the desktop runs (its relay's kind and slot): Stop's cooldowns outlive it."""
        return place_key(self.relay_id, self.kind, self.slot)

    @classmethod
    def of_row(cls, row: DesktopRow) -> DesktopTarget:
        return cls(row.relay_id, row.kind, row.slot, row.desktop_session_id)


@dataclass(frozen=True)
class AgentGrant:
    """The grant an admitted input runs under."""

    service: ControlService
    target: DesktopTarget
    grant: Grant

    def in_flight(self) -> contextlib.AbstractAsyncContextManager[Any]:
        """Mark the request in flight: Stop cancels it (``stopped_by_user``)."""
        return self.service.inflight.track(self.target.key, self.grant.agent_id)

    def acted(self, action: str, **shape: Any) -> None:
        """Tell the desktop's viewers what the agent just did (``x``/``y`` mark the spot;
        never typed text)."""
        self.service.agent_acted(
            self.target.key, {"agent": self.grant.agent_name, "action": action, **shape}
        )


def control_of(ctx: GateContext) -> ControlService:
    return ctx.parts.control


def is_person(principal: Principal) -> bool:
    """A person signed in to the web app (cookie session); an API token is an agent."""
    return principal.via == "cookie"


def require_person(ctx: GateContext, action: str) -> None:
    """``403 forbidden`` unless a person calls: take control, hand back and Stop are theirs."""
    if not is_person(ctx.principal):
        raise OpError(
            ErrorCode.FORBIDDEN,
            f"{action} is for people signed in to relaydesk; an API token acts as an agent",
            {"reason": "agent_principal"},
        )


def agent_request(ctx: GateContext, window_id: str | None, scope: GrantScope) -> AgentRequest:
    if scope == "window" and not window_id:
        raise InvalidArgs("window_id", "a window grant needs the window's id")
    principal = ctx.principal
    return AgentRequest(principal.user_id, principal.username, scope, window_id)


async def admit_agent_input(
    ctx: GateContext,
    target: DesktopTarget,
    *,
    window_id: str | None = None,
    scope: GrantScope = "desktop",
) -> AgentGrant:
    """Admit one agent input on ``target`` (minting the agent's grant if it holds none);
    ``OpError`` ``takeover_active`` / ``stopped_by_user`` / ``stale_screen`` otherwise."""
    request = agent_request(ctx, window_id, scope)
    context = AuditContext(ctx.conversation_id or None, ctx.source, ctx.request_id)
    relay_name = ctx.relay.name if ctx.relay is not None else None
    service = control_of(ctx)
    grant = await service.admit(
        target.key, request, place=target.place, relay_name=relay_name, context=context
    )
    return AgentGrant(service, target, grant)


@contextlib.asynccontextmanager
async def agent_input(
    ctx: GateContext,
    target: DesktopTarget,
    *,
    window_id: str | None = None,
    scope: GrantScope = "desktop",
) -> AsyncIterator[AgentGrant]:
    """In flight, then admitted: the body sends the input; Stop ends it with
    ``stopped_by_user``."""
    service = control_of(ctx)
    async with service.inflight.track(target.key, ctx.principal.user_id):
        yield await admit_agent_input(ctx, target, window_id=window_id, scope=scope)


@contextlib.asynccontextmanager
async def agent_act(ctx: GateContext, target: DesktopTarget) -> AsyncIterator[None]:
    """An act on a running desktop's life (launch an app, stop it): for an agent, through
    :func:`agent_input`; a person's own act passes."""
    if is_person(ctx.principal):
        yield
        return
    async with agent_input(ctx, target):
        yield


async def admit_agent_place(ctx: GateContext, kind: DesktopKind, slot: str) -> None:
    """Before an agent starts a desktop in ``(kind, slot)`` of the context's relay:
    ``stopped_by_user`` while a person's Stop holds it there (a person passes)."""
    if is_person(ctx.principal):
        return
    context = AuditContext(ctx.conversation_id or None, ctx.source, ctx.request_id)
    request = agent_request(ctx, None, "desktop")
    await control_of(ctx).admit_place(place_key(ctx.relay_id, kind, slot), request, context=context)


async def resolve_target(
    ctx: GateContext,
    *,
    desktop_session_id: str | None = None,
    kind: DesktopKind = "virtual",
    slot: str = "main",
) -> DesktopTarget:
    """The running desktop of the context's relay that the input means: the named session,
    else the one in ``(kind, slot)``; ``not_running`` when there is none.

    Read from the conversation's live rows, which the store keeps for a moment and forgets on
    every write (on every replica, with Redis); callers send the input to exactly the session
    found (``desktop_session_id``), so a desktop replaced meanwhile gets none of it.
    """
    relay_id = ctx.relay_id
    for row in await ctx.store.visible_desktops(ctx.conversation_id):
        if row.relay_id != relay_id or row.state not in ("running", "paused"):
            continue
        if desktop_session_id is not None:
            found = row.desktop_session_id == desktop_session_id
        else:
            found = (row.kind, row.slot) == (kind, slot)
        if found and row.state == "paused":
            # At once: input on a frozen desktop would wait for its resume.
            raise OpError(
                ErrorCode.PAUSED,
                "this desktop is paused; resume it first (desktop_resume)",
                {"desktop_session_id": row.desktop_session_id},
            )
        if found:
            return DesktopTarget.of_row(row)
    raise OpError(ErrorCode.NOT_RUNNING, "no running desktop there; start one first")
