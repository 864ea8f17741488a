"""How many long-lived connections one user, or one address, may hold open on this server.

Every stream and socket a client keeps open — the event stream, Cua's WebSocket, a viewer or
audio WebSocket, an MCP call — holds a file descriptor for as long as it lasts. Without a cap,
one member of one conversation can hold enough of them to starve everybody else's requests.
Each server process counts its own: at most ``per_principal`` per user (all of the user's
tokens and sessions together) and ``per_address`` per client address; one more is refused with
429 ``limit_reached`` naming the cap and the setting that raises it (``0`` turns a cap off).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Final, Literal

from wire.errors import ErrorCode, RequestRejected

PRINCIPAL_SETTING: Final = "RELAYDESK_MAX_STREAMS_PER_PRINCIPAL"
ADDRESS_SETTING: Final = "RELAYDESK_MAX_STREAMS_PER_ADDRESS"
Holder = Literal["user", "address"]


class TooManyStreams(RequestRejected):
    """One more long-lived connection than the cap allows (429)."""

    status = 429

    def __init__(self, holder: Holder, limit: int) -> None:
        self.holder = holder
        self.limit = limit
        setting = PRINCIPAL_SETTING if holder == "user" else ADDRESS_SETTING
        super().__init__(
            ErrorCode.LIMIT_REACHED,
            f"too many open streams for this {holder}: at most {limit} at once on this server "
            f"({setting}); close one and retry",
            {"limit": limit, "hint": f"close an open stream or socket, or raise {setting}"},
        )


class StreamLimits:
    """Open long-lived connections of this process, per user and per client address."""

    def __init__(self, per_principal: int, per_address: int) -> None:
        self.per_principal = per_principal
        self.per_address = per_address
        self._users: Counter[str] = Counter()
        self._addresses: Counter[str] = Counter()

    def open_for(self, user_id: str | None = None, address: str | None = None) -> int:
        """Connections held now by ``user_id`` or ``address`` (all, when neither is named)."""
        if user_id is not None:
            return self._users[user_id]
        if address is not None:
            return self._addresses[address]
        return self._users.total()

    def admit(self, user_id: str, address: str) -> None:
        """Raise :class:`TooManyStreams` when either holder is at its cap."""
        if 0 < self.per_principal <= self._users[user_id]:
            raise TooManyStreams("user", self.per_principal)
        if 0 < self.per_address <= self._addresses[address]:
            raise TooManyStreams("address", self.per_address)

    def take(self, user_id: str, address: str) -> Callable[[], None]:
        """Count one connection (``TooManyStreams`` at a cap); returns its release, which
        gives the slot back once however often it is called."""
        self.admit(user_id, address)
        self._users[user_id] += 1
        self._addresses[address] += 1
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                _release(self._users, user_id)
                _release(self._addresses, address)

        return release


def _release(counts: Counter[str], key: str) -> None:
    counts[key] -= 1
    if counts[key] <= 0:
        del counts[key]
