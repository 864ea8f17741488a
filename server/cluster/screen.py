"""Screen calls on revisions another replica issued: sent whole to that replica.

A screen revision names the replica that issued it (``server.screen.revisions``), and only
that replica keeps its capture. A call that needs the capture (a guarded click, double click,
drag or mouse_down; coordinates read on a zoom) and comes in elsewhere is sent, with who
called it, to the issuing replica over the replica link (``replica.screen``,
``server.cluster.channel``). There it is checked, guarded and sent on to the relay's owner like a
call of its own, and audited. The entry replica has already admitted the caller (role,
visibility, the control gate); the issuing replica trusts that because the link is signed.

A replica that is dead (per Redis) or does not answer is :class:`IssuerGone`: the caller gets
``revision_expired`` and takes a new screenshot, as when a capture expired.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Final

from server.cluster.channel import HOP_MARGIN_S, NotOwner
from server.screen.tool import Caller, IssuerGone
from wire.errors import ErrorCode, OpError

if TYPE_CHECKING:
    from server.cluster.router import ClusterRouter

CALLER_FIELDS: Final = ("actor", "conversation_id", "relay_id", "source")


def hop_timeout(timeout_s: float) -> float:
    """How long the issuing replica may take: a pointer read and the action (each up to the
    relay's ``timeout_s``), each perhaps through the relay's owner."""
    return 2 * (timeout_s + HOP_MARGIN_S)


def caller_from(data: Any) -> Caller:
    """The caller of a forwarded call; ``ValueError`` when it is not one."""
    if not isinstance(data, dict) or not all(isinstance(data.get(f), str) for f in CALLER_FIELDS):
        raise ValueError("a forwarded screen call names its caller")
    return Caller(*(str(data[f]) for f in CALLER_FIELDS))


class ScreenForwarding:
    """The other replicas, for the screen tool's calls on their revisions."""

    def __init__(self, cluster: ClusterRouter) -> None:
        self._cluster = cluster

    @property
    def replica_id(self) -> str:
        return self._cluster.replica_id

    async def run(
        self, issuer: str, caller: Caller, body: dict[str, Any], timeout_s: float
    ) -> dict[str, Any]:
        """Run the call on ``issuer``: its answer or its ``OpError``; :class:`IssuerGone` when
        that replica is not alive or cannot be reached."""
        url = await self._cluster.replica_url(issuer)
        if url is None:
            raise IssuerGone(f"replica {issuer} is not alive")
        call = {"caller": dataclasses.asdict(caller), "body": body}
        self._cluster.forwarded["screen"] += 1
        try:
            result = await self._cluster.peers.screen(issuer, url, call, hop_timeout(timeout_s))
        except NotOwner as err:
            raise IssuerGone(err.message) from err
        if not isinstance(result, dict):
            raise OpError(ErrorCode.PROTOCOL_ERROR, f"replica {issuer} answered no screen result")
        return result
