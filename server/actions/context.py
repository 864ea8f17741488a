"""What an action handler is given: the caller, the conversation, and the server's parts
(:class:`ActionParts`, built once by the composition root, ``server.app``)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Protocol, TypeVar

from server.actions.errors import relay_error
from server.auth.principal import Principal
from server.config import Settings
from server.control.service import ControlService
from server.db.records import RelayRecord, Role
from server.db.rows import DesktopRow
from server.db.store import Store
from server.inventory.service import Inventory
from server.relays.calls import call
from server.relays.router import RelayRouter
from wire.errors import ErrorCode, InvalidArgs, OpError
from wire.ids import RelayId
from wire.ops import OpSpec

A = TypeVar("A")
R = TypeVar("R")


class Recorded(Protocol):
    recording_id: str


class DesktopRecorder(Protocol):
    """What the actions need of the recordings (``server.recordings.service``)."""

    async def turn_on(self, row: DesktopRow, conversation_id: str, actor: str) -> Recorded: ...

    async def turn_off(self, row: DesktopRow) -> Recorded | None: ...

    async def records_by_default(self, conversation_id: str) -> bool: ...


@dataclass(frozen=True)
class ActionParts:
    """The server's parts an action handler may use."""

    settings: Settings
    store: Store
    relays: RelayRouter
    inventory: Inventory
    control: ControlService
    # Recordings (docs/recording.md); absent where a server keeps none (tests of other parts).
    recordings: DesktopRecorder | None = None


@dataclass
class ActionContext:
    """One action call; handlers fill ``relay``, ``desktop_session_id`` and ``outcome``."""

    parts: ActionParts
    principal: Principal
    conversation_id: str
    role: Role
    source: str
    request_id: str
    relay: RelayRecord | None = None
    desktop_session_id: str | None = None
    outcome: str = "ok"
    # What the audit row keeps of the call beyond its outcome (shapes, never content).
    details: dict[str, Any] | None = None

    @property
    def store(self) -> Store:
        return self.parts.store

    @property
    def relays(self) -> RelayRouter:
        return self.parts.relays

    @cached_property
    def inventory(self) -> Inventory:
        """The inventory as this call uses it: a desktop it starts is recorded as started by the
        caller (the server's own record; a relay's ``started_by`` is never taken)."""
        return self.parts.inventory.acting_for(self.principal.username)

    @property
    def settings(self) -> Settings:
        return self.parts.settings

    @property
    def relay_id(self) -> RelayId:
        if self.relay is None:
            raise OpError(ErrorCode.INTERNAL, "no relay resolved")
        return self.relay.relay_id

    async def resolve_relay(self, name_or_id: str | None) -> RelayRecord:
        """The relay (name or id) if shared with the conversation, else ``relay_not_found``.

        Without a name, the conversation's only relay; several make the name required.
        """
        visible = await self.store.relays_visible_in(self.conversation_id)
        if name_or_id is None:
            if len(visible) != 1:
                raise InvalidArgs(
                    "relay", f"required: this conversation sees {len(visible)} relays"
                )
            self.relay = visible[0]
            return self.relay
        for relay in visible:
            if name_or_id in (relay.name, relay.relay_id):
                self.relay = relay
                return relay
        raise OpError(ErrorCode.RELAY_NOT_FOUND, "no such relay in this conversation")

    async def relay_call(self, op: OpSpec[A, R], args: A, extra_s: float = 0.0) -> R:
        """Ask the resolved relay to run ``op`` (given ``extra_s`` beyond the request timeout,
        for ops that wait on purpose); its errors become the action's errors."""
        try:
            timeout = self.settings.request_timeout_s + extra_s
            return await call(self.relays, self.relay_id, op, args, timeout)
        except OpError as err:
            raise relay_error(err) from err
