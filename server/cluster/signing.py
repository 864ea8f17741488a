"""Authentication of the link between replicas: HMAC-SHA256 with the cluster secret.

A signature covers the method, the path (with its query), the **target** (the internal address
of the replica the request is meant for, ``RELAYDESK_INTERNAL_URL`` or host:port), a timestamp,
a nonce and the body. The answering replica verifies with its own address as the target, so a
request captured on its way to one replica is refused by every other. A request older or newer
than :data:`REPLAY_WINDOW_S` is refused, and so is one whose nonce was already used inside the
window: nonces are remembered in a :class:`NonceBook`, one for all replicas when they share
Redis (``server.cluster.nonces``), so a replay is refused whichever replica it is sent to, and
after a restart. The checks are pure; only the nonce book does I/O.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import secrets
import time
from collections.abc import Callable, Mapping
from typing import Final, Protocol

from wire.errors import ErrorCode, OpError

REPLAY_WINDOW_S: Final = 30.0
# A timestamp may be up to the window ahead of the verifier's clock, so a nonce must be
# remembered until the window has passed after that timestamp: twice the window from now.
NONCE_TTL_S: Final = math.ceil(2 * REPLAY_WINDOW_S) + 1
TIMESTAMP: Final = "x-relaydesk-timestamp"
NONCE: Final = "x-relaydesk-nonce"
SIGNATURE: Final = "x-relaydesk-signature"
MAX_NONCES: Final = 200_000
MAX_NONCE_CHARS: Final = 64


class NonceBook(Protocol):
    """Where the nonces of verified requests are remembered for ``ttl_s`` seconds."""

    async def first_use(self, nonce: str, ttl_s: int) -> bool:
        """Remember ``nonce``; ``False`` when it was already remembered (a replay)."""
        ...


class LocalNonces:
    """The nonces this process verified (one server, or tests): bounded, oldest dropped."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._until: dict[str, float] = {}

    async def first_use(self, nonce: str, ttl_s: int) -> bool:
        now = self._clock()
        if self._until.get(nonce, -math.inf) > now:
            return False
        if len(self._until) >= MAX_NONCES:
            self._until = {n: t for n, t in self._until.items() if t > now}
        self._until[nonce] = now + ttl_s
        return True


def normalized_target(url: str) -> str:
    """A replica's internal address as both sides sign it."""
    return url.strip().rstrip("/").lower()


def _mac(
    secret: bytes, method: str, path: str, target: str, timestamp: str, nonce: str, body: bytes
) -> str:
    fields = (method.upper(), path, normalized_target(target), timestamp, nonce)
    head = "".join(f"{field}\n" for field in fields).encode()
    return hmac.new(secret, head + body, hashlib.sha256).hexdigest()


def _refused(reason: str) -> OpError:
    return OpError(ErrorCode.FORBIDDEN, reason)


class ClusterSigner:
    """Signs outgoing internal requests and verifies incoming ones."""

    def __init__(
        self,
        secret: str,
        clock: Callable[[], float] = time.time,
        nonces: NonceBook | None = None,
    ) -> None:
        if not secret:
            raise ValueError("the replica link needs a cluster secret")
        self._secret = secret.encode()
        self._clock = clock
        self._nonces = nonces if nonces is not None else LocalNonces()

    def sign(self, method: str, path: str, body: bytes = b"", *, target: str) -> dict[str, str]:
        """Headers that authenticate this request to the replica at ``target`` only."""
        timestamp = f"{self._clock():.3f}"
        nonce = secrets.token_hex(12)
        mac = _mac(self._secret, method, path, target, timestamp, nonce, body)
        return {TIMESTAMP: timestamp, NONCE: nonce, SIGNATURE: mac}

    def check(
        self,
        method: str,
        path: str,
        headers: Mapping[str, str],
        body: bytes = b"",
        *,
        target: str,
    ) -> str:
        """The request's nonce if its signature (for ``target``) and time are right; else
        raise ``forbidden``. The nonce is not yet spent: :meth:`verify` spends it."""
        timestamp, nonce = headers.get(TIMESTAMP, ""), headers.get(NONCE, "")
        given = headers.get(SIGNATURE, "")
        if not (timestamp and nonce and given):
            raise _refused("internal request without a cluster signature")
        if len(nonce) > MAX_NONCE_CHARS:
            raise _refused("bad cluster nonce")
        expected = _mac(self._secret, method, path, target, timestamp, nonce, body)
        if not hmac.compare_digest(expected, given):
            raise _refused("bad cluster signature (another secret, or meant for another replica)")
        try:
            moment = float(timestamp)
        except ValueError:
            raise _refused("bad cluster timestamp") from None
        if not abs(self._clock() - moment) <= REPLAY_WINDOW_S:
            raise _refused("cluster request outside the replay window")
        return nonce

    async def verify(
        self,
        method: str,
        path: str,
        headers: Mapping[str, str],
        body: bytes = b"",
        *,
        target: str,
    ) -> None:
        """Raise ``forbidden`` unless the headers authenticate this request to ``target``,
        once in the whole cluster."""
        nonce = self.check(method, path, headers, body, target=target)
        if not await self._nonces.first_use(nonce, NONCE_TTL_S):
            raise _refused("cluster request replayed")
