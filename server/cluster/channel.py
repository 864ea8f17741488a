"""The link between replicas as both of its sides spell it: its path and signed header, the
operations one replica asks of another, how "not owner" travels, and the kinds of calls one
replica forwards to another.

One replica reaches another through one persistent WebSocket, the **replica link**
(``LINK_PATH``). It speaks the relay protocol (``wire.connection``): the calling replica sends
requests and opens channels, multiplexed, each channel with its own credit window; the
answering replica runs them on the relays it holds. The calling side (``server.cluster.peers``,
with its HTTP client and the ownership kept in Redis) is loaded only when replicas share Redis;
the answering side (``server.cluster.internal``) and ``/metrics`` are part of every server and
need only this.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, Literal, get_args

from wire.errors import ErrorCode, OpError, RelaydeskError

if TYPE_CHECKING:
    from server.cluster.ownership import Owner

LINK_PATH: Final = "/internal/v1/link"
# The calling replica's id: signed as the upgrade's body, so a log line names a real replica.
LINK_REPLICA: Final = "x-relaydesk-replica"
# Operations on the replica link: a request to a relay held there, a channel to one of its
# targets, a screen call on a revision issued there (``server.cluster.screen``).
RELAY_REQUEST: Final = "replica.relay_request"
RELAY_CHANNEL: Final = "replica.relay_channel"
SCREEN_CALL: Final = "replica.screen"
# Time beyond the relay's own timeout for the hop between replicas.
HOP_MARGIN_S: Final = 5.0
# What a replica sends to another: relay requests and channels to the relay's owner, screen
# calls to the replica that issued their revision (``server.cluster.screen``).
ForwardKind = Literal["request", "channel", "screen"]
FORWARD_KINDS: Final[tuple[ForwardKind, ...]] = get_args(ForwardKind)
# In an error's details: the replica asked does not hold the relay (under that epoch).
NOT_OWNER: Final = "not_owner"


class NotOwner(RelaydeskError):
    """The replica asked does not (or no longer) hold the relay, or cannot be reached."""

    code = ErrorCode.RELAY_UNREACHABLE


def not_owner_error() -> OpError:
    """What the answering replica says about a relay it does not hold."""
    return OpError(
        ErrorCode.RELAY_UNREACHABLE, "the replica does not hold the relay", {NOT_OWNER: True}
    )


def is_not_owner(err: OpError) -> bool:
    return err.code is ErrorCode.RELAY_UNREACHABLE and err.details.get(NOT_OWNER) is True


def relay_call(owner: Owner, **fields: Any) -> dict[str, Any]:
    """The arguments naming ``owner``'s relay (and the epoch it was held under), plus
    ``fields``."""
    return {"relay_id": str(owner.relay_id), "epoch": owner.epoch, **fields}
