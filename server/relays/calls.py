"""Typed relay calls: an op of ``wire.ops`` with its ``TypedDict`` arguments, its result typed.

``await call(relays, relay_id, ops.DESKTOP_STOP, ops.DesktopStopArgs(...))`` is checked by mypy on
both sides: an argument the op does not take, and a result field it does not give, are errors.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, Protocol, TypeVar, cast

from wire.errors import ErrorCode, OpError
from wire.ids import RelayId
from wire.ops import OpSpec

A = TypeVar("A")
R = TypeVar("R")
DEFAULT_TIMEOUT_S = 30.0


class Requester(Protocol):
    """What sends a request to a relay (``RelayHub``, the cluster's router)."""

    def request(
        self, relay_id: RelayId, op: str, args: dict[str, Any] | None = ..., timeout_s: float = ...
    ) -> Awaitable[Any]: ...


async def call(
    relays: Requester,
    relay_id: RelayId,
    op: OpSpec[A, R],
    args: A,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> R:
    """Run ``op`` on the relay; a result that is not an object is ``protocol_error``."""
    result = await relays.request(relay_id, op.name, cast(dict[str, Any], args), timeout_s)
    if not isinstance(result, dict):
        raise OpError(ErrorCode.PROTOCOL_ERROR, f"the relay answered {op.name} without an object")
    return cast(R, result)
