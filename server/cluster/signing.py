"""Authentication of the link between replicas: HMAC-SHA256 with the cluster secret.

A signature covers the method, the path (with its query), a timestamp, a nonce and the body. A
request older or newer than :data:`REPLAY_WINDOW_S`, or whose nonce was already seen inside the
window, is refused, so a captured request cannot be replayed. Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable, Mapping

from wire.errors import ErrorCode, OpError

REPLAY_WINDOW_S = 30.0
TIMESTAMP = "x-relaydesk-timestamp"
NONCE = "x-relaydesk-nonce"
SIGNATURE = "x-relaydesk-signature"
MAX_NONCES = 200_000


def _mac(secret: bytes, method: str, path: str, timestamp: str, nonce: str, body: bytes) -> str:
    head = f"{method.upper()}\n{path}\n{timestamp}\n{nonce}\n".encode()
    return hmac.new(secret, head + body, hashlib.sha256).hexdigest()


class ClusterSigner:
    """Signs outgoing internal requests and verifies incoming ones."""

    def __init__(self, secret: str, clock: Callable[[], float] = time.time) -> None:
        if not secret:
            raise ValueError("the replica link needs a cluster secret")
        self._secret = secret.encode()
        self._clock = clock
        self._seen: dict[str, float] = {}

    def sign(self, method: str, path: str, body: bytes = b"") -> dict[str, str]:
        """Headers that authenticate this request."""
        timestamp = f"{self._clock():.3f}"
        nonce = secrets.token_hex(12)
        mac = _mac(self._secret, method, path, timestamp, nonce, body)
        return {TIMESTAMP: timestamp, NONCE: nonce, SIGNATURE: mac}

    def verify(self, method: str, path: str, headers: Mapping[str, str], body: bytes = b"") -> None:
        """Raise ``forbidden`` unless the headers authenticate this request, once."""
        timestamp, nonce = headers.get(TIMESTAMP, ""), headers.get(NONCE, "")
        given = headers.get(SIGNATURE, "")
        if not (timestamp and nonce and given):
            raise OpError(ErrorCode.FORBIDDEN, "internal request without a cluster signature")
        expected = _mac(self._secret, method, path, timestamp, nonce, body)
        if not hmac.compare_digest(expected, given):
            raise OpError(ErrorCode.FORBIDDEN, "bad cluster signature")
        try:
            moment = float(timestamp)
        except ValueError:
            raise OpError(ErrorCode.FORBIDDEN, "bad cluster timestamp") from None
        now = self._clock()
        if abs(now - moment) > REPLAY_WINDOW_S:
            raise OpError(ErrorCode.FORBIDDEN, "cluster request outside the replay window")
        self._remember(nonce, now)

    def _remember(self, nonce: str, now: float) -> None:
        if nonce in self._seen:
            raise OpError(ErrorCode.FORBIDDEN, "cluster request replayed")
        if len(self._seen) >= MAX_NONCES:
            horizon = now - REPLAY_WINDOW_S
            self._seen = {n: t for n, t in self._seen.items() if t > horizon}
        self._seen[nonce] = now
