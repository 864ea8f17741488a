"""Screen revisions: signed names for screenshots, and the captures kept behind them.

A revision is ``sr1.<base64url(payload)>.<base64url(hmac)>``; the payload is compact JSON
``{i, r, s, d, t, o?}`` (random id, relay, desktop session, display, issue time, and with
several replicas the id of the replica that issued it and keeps its capture) and the HMAC
(SHA-256 with the server's secret key, truncated to 128 bits) covers all of it. Agents treat
it as opaque; the server can tell a forged revision, one for another target, and one whose
capture expired apart without a lookup, and a replica can tell where a revision's capture is
kept (``server.cluster.screen`` sends the call there).

A revision names a screenshot or a zoom (a region of the screen, ``View``). The
:class:`RevisionStore` keeps each revision's full-resolution capture as the relay sent it:
the screenshot's PNG, made of independently deflated row bands (``wire.capture``; lossless,
~2 % of the raw size for desktop pixels; a guard crop inflates only its bands), with a TTL and
a total memory bound enforced by least-recently-used eviction.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import logging
import re
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from wire.capture import Base64BandedPng
from wire.compare import same_text
from wire.errors import ErrorCode, InvalidArgs, OpError
from wire.guard import CropRect

logger = logging.getLogger(__name__)

REVISION_PREFIX = "sr1"
MAX_REVISION_LENGTH = 1024
_DOMAIN = b"relaydesk.screen_revision.v1"
_MAC_BYTES = 16
_TOKEN_RE = re.compile(rf"{REVISION_PREFIX}\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+")
# Per-entry bookkeeping beyond the compressed bytes (objects, dict slots), measured with
# tracemalloc in benchmarks/bench_screen.py and rounded up.
ENTRY_OVERHEAD_BYTES = 1024


@dataclass(frozen=True)
class Binding:
    """The one target a revision belongs to."""

    relay_id: str
    desktop_session_id: str
    display: str


@dataclass(frozen=True)
class Revision:
    """A verified revision: its id, target, issue time (unix seconds) and the replica that
    issued it (empty on one machine)."""

    revision_id: str
    binding: Binding
    issued_at: float
    issuer: str = ""


@dataclass(frozen=True)
class View:
    """What a kept capture shows: ``region`` of a screen of ``screen`` size, given to the agent
    as an image of ``image`` size. A screenshot shows the whole screen at full size; a zoom
    shows a region, perhaps enlarged."""

    screen: tuple[int, int]
    region: CropRect
    image: tuple[int, int]
    zoom: bool = False

    @classmethod
    def whole(cls, width: int, height: int) -> View:
        return cls((width, height), CropRect(0, 0, width, height), (width, height))


class Capture(Base64BandedPng):
    """A full-resolution screenshot as the relay sent it: the base64 text of a PNG of row bands
    (``wire.capture``), decoded band by band when a guard crop is cut."""

    @property
    def size_bytes(self) -> int:
        """What keeping it costs: the base64 text plus the entry's bookkeeping."""
        return len(self.text) + ENTRY_OVERHEAD_BYTES


# -- revision tokens ---------------------------------------------------------------------------


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _mac(key: str, payload: bytes) -> bytes:
    digest = hmac.new(key.encode(), _DOMAIN + b"." + payload, hashlib.sha256).digest()
    return digest[:_MAC_BYTES]


def new_revision(binding: Binding, now: float, issuer: str = "") -> Revision:
    """A fresh revision for ``binding`` (issue time kept to the millisecond, as signed)."""
    return Revision(secrets.token_hex(12), binding, round(now, 3), issuer)


def token_for(key: str, revision: Revision) -> str:
    """The signed token naming ``revision``."""
    b = revision.binding
    fields: dict[str, object] = {
        "i": revision.revision_id,
        "r": b.relay_id,
        "s": b.desktop_session_id,
        "d": b.display,
        "t": revision.issued_at,
    }
    if revision.issuer:
        fields["o"] = revision.issuer
    payload = json.dumps(fields, separators=(",", ":")).encode()
    return f"{REVISION_PREFIX}.{_b64(payload)}.{_b64(_mac(key, payload))}"


def _forged() -> OpError:
    return OpError(
        ErrorCode.REVISION_MISMATCH,
        "this screen_revision was not issued by this server; take a new screenshot",
        {"reason": "not_issued_here"},
    )


def _malformed() -> InvalidArgs:
    return InvalidArgs("expected_screen_revision", "is not a screen_revision from a screenshot")


def verify(key: str, token: object) -> Revision:
    """The revision ``token`` names, if this server signed it."""
    if not isinstance(token, str) or not token or len(token) > MAX_REVISION_LENGTH:
        raise InvalidArgs("expected_screen_revision", "must be a screen_revision string")
    if not _TOKEN_RE.fullmatch(token):
        raise _malformed()
    parts = token.split(".")
    try:
        payload, mac = _unb64(parts[1]), _unb64(parts[2])
    except (binascii.Error, ValueError) as err:
        raise _malformed() from err
    if not hmac.compare_digest(mac, _mac(key, payload)):
        raise _forged()
    try:
        data = json.loads(payload)
        binding = Binding(str(data["r"]), str(data["s"]), str(data["d"]))
        return Revision(str(data["i"]), binding, float(data["t"]), str(data.get("o", "")))
    except (ValueError, KeyError, TypeError) as err:
        raise _forged() from err


# -- the store ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class KeptCapture:
    """A verified revision, the capture kept for it and what that capture shows."""

    revision: Revision
    capture: Capture
    view: View


@dataclass(frozen=True)
class StoreStats:
    """Counters for operators and the benchmark."""

    entries: int
    memory_bytes: int
    memory_limit: int
    evicted_for_memory: int
    expired: int


class RevisionStore:
    """Captures by revision id: TTL, total memory bound, least-recently-used eviction.

    ``issuer`` names this replica in the revisions it issues (empty on one machine)."""

    def __init__(
        self,
        key: str,
        ttl_s: float = 300.0,
        memory_bytes: int = 256 * 1024 * 1024,
        clock: Callable[[], float] = time.time,
        issuer: str = "",
    ) -> None:
        if not key:
            raise ValueError("the revision store needs the server's secret key")
        self._key = key
        self.issuer = issuer
        self.ttl_s = ttl_s
        self.memory_limit = memory_bytes
        self.clock = clock
        self._used: OrderedDict[str, KeptCapture] = OrderedDict()  # least recently used first
        self._born: OrderedDict[str, float] = OrderedDict()  # oldest first (TTL sweeps)
        # binding -> (revision_id, token) of its newest screenshot (zooms show only a part)
        self._latest: dict[Binding, tuple[str, str]] = {}
        self._memory = 0
        self._evicted = 0
        self._expired = 0

    def __len__(self) -> int:
        return len(self._used)

    def stats(self) -> StoreStats:
        return StoreStats(
            len(self._used), self._memory, self.memory_limit, self._evicted, self._expired
        )

    def keep(self, binding: Binding, capture: Capture, view: View | None = None) -> str:
        """Keep ``capture`` (showing ``view``; default: the whole screen) under a new revision
        for ``binding``; returns its token."""
        view = view or View.whole(capture.width, capture.height)
        now = self.clock()
        revision = new_revision(binding, now, self.issuer)
        token = token_for(self._key, revision)
        self._sweep(now)
        if capture.size_bytes > self.memory_limit:
            logger.warning(
                "a screen capture of %d bytes is larger than the revision store; not kept",
                capture.size_bytes,
            )
            return token
        rid = revision.revision_id
        self._used[rid] = KeptCapture(revision, capture, view)
        self._born[rid] = revision.issued_at
        if not view.zoom:
            self._latest[binding] = (rid, token)
        self._memory += capture.size_bytes
        while self._memory > self.memory_limit:
            self._remove(next(iter(self._used)))
            self._evicted += 1
        return token

    def lookup(self, token: object, relay_id: str, desktop_session_id: str | None) -> KeptCapture:
        """The capture behind ``token`` if it belongs to this target and is still kept.

        ``desktop_session_id`` None means the relay's default desktop: the relay then checks
        that its default is the revision's session and display before any input.
        """
        revision = verify(self._key, token)
        binding = revision.binding
        session = desktop_session_id or binding.desktop_session_id
        same_relay = same_text(binding.relay_id, relay_id)
        if not (same_relay and same_text(binding.desktop_session_id, session)):
            raise OpError(
                ErrorCode.REVISION_MISMATCH,
                "this screen_revision belongs to another relay or desktop session",
                {"reason": "other_target"},
            )
        now = self.clock()
        self._sweep(now)
        kept = self._used.get(revision.revision_id)
        if kept is None or kept.revision != revision:
            reason = "ttl" if now - revision.issued_at >= self.ttl_s else "evicted"
            raise OpError(
                ErrorCode.REVISION_EXPIRED,
                "the screenshot of this screen_revision is no longer kept; take a new one",
                {"reason": reason, "ttl_s": self.ttl_s},
            )
        self._used.move_to_end(revision.revision_id)
        return kept

    def issued_elsewhere(self, token: object) -> str | None:
        """The replica that issued ``token`` when that is another one; ``None`` for this
        replica's revisions and for anything that is not a revision of ours (``lookup`` says
        what is wrong with it)."""
        try:
            issuer = verify(self._key, token).issuer
        except OpError:
            return None
        return issuer if issuer and issuer != self.issuer else None

    def latest(self, binding: Binding) -> str | None:
        """The newest kept screenshot of ``binding``, if any (a hint after a stale click)."""
        latest = self._latest.get(binding)
        return latest[1] if latest is not None and latest[0] in self._used else None

    def _sweep(self, now: float) -> None:
        """Drop every capture older than the TTL (oldest first, so this stops early)."""
        while self._born:
            rid, born = next(iter(self._born.items()))
            if now - born < self.ttl_s:
                break
            self._remove(rid)
            self._expired += 1

    def _remove(self, revision_id: str) -> None:
        kept = self._used.pop(revision_id)
        del self._born[revision_id]
        self._memory -= kept.capture.size_bytes
        binding = kept.revision.binding
        if self._latest.get(binding, ("", ""))[0] == revision_id:
            del self._latest[binding]
