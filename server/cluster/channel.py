"""The internal channel between replicas as both of its sides spell it: the paths, the header
that carries a channel's call, how a relay channel's close code travels as a WebSocket close
code, the "not owner" answer, and the kinds of calls one replica forwards to another.

The calling side (``server.cluster.peers``, with its HTTP client and the ownership kept in
Redis) is loaded only when replicas share Redis; the answering side
(``server.cluster.internal``) and ``/metrics`` are part of every server and need only this.
"""

from __future__ import annotations

from typing import Final, Literal, get_args

from wire.errors import ChannelCloseCode, ErrorCode, RelaydeskError

REQUEST_PATH: Final = "/internal/v1/request"
CHANNEL_PATH: Final = "/internal/v1/channel"
SCREEN_PATH: Final = "/internal/v1/screen"
CHANNEL_CALL: Final = "x-relaydesk-channel"
# A relay channel close code travels as this plus its ``ChannelCloseCode``.
CHANNEL_CLOSE_BASE: Final = 4100
# Time beyond the relay's own timeout for the hop between replicas.
HOP_MARGIN_S: Final = 5.0
# What a replica sends to another: relay requests and channels to the relay's owner, screen
# calls to the replica that issued their revision (``server.cluster.screen``).
ForwardKind = Literal["request", "channel", "screen"]
FORWARD_KINDS: Final[tuple[ForwardKind, ...]] = get_args(ForwardKind)


class NotOwner(RelaydeskError):
    """The replica asked does not (or no longer) hold the relay, or cannot be reached."""

    code = ErrorCode.RELAY_UNREACHABLE


def close_code_for(code: ChannelCloseCode) -> int:
    return CHANNEL_CLOSE_BASE + int(code)


def channel_code_from(ws_code: int | None) -> ChannelCloseCode:
    try:
        return ChannelCloseCode((ws_code or 0) - CHANNEL_CLOSE_BASE)
    except ValueError:
        return ChannelCloseCode.RELAY_GONE
