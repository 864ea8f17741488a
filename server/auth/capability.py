"""Viewer capabilities: HMAC-signed, expiring grants bound to one desktop session.

A token is ``base64url(payload) . base64url(hmac_sha256(key, payload))`` where the payload is
compact JSON ``{u, c, r, s, e, p, m}`` (user, conversation, relay, desktop session, expiry,
``p: 1`` when it was minted for a person, and ``m``, the minting credential: its kind and a
short one-way hash of its secret's hash, ``server.auth.revocation.minted_ref``; never the
secret). The viewer's streams are watched under that credential, so revoking the API token or
signing out the web session that minted it closes them. It travels only in viewer paths
(``/vnc/{sid}/{token}/…``), never in API URLs.

Only a person (a cookie session) gets a capability whose input reaches the desktop and counts
as that person's. One minted for an API token — an agent — is view only: the server drops
every input its viewer sends (``server.viewer.view_only``), so an agent can never type past
"Take control" or Stop by way of a viewer. A token without ``p`` is view only.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
import time
from dataclasses import dataclass
from enum import StrEnum

from wire.compare import same_text
from wire.errors import CloseCode, ErrorCode, RelaydeskError

_DOMAIN = b"relaydesk.viewer.v1"


class Denial(StrEnum):
    """Why a viewer token was refused; each maps to one close code."""

    MALFORMED = "malformed"
    FORGED = "forged"
    EXPIRED = "expired"
    OTHER_SESSION = "other_session"

    @property
    def close_code(self) -> CloseCode:
        if self is Denial.EXPIRED:
            return CloseCode.VIEWER_EXPIRED
        return CloseCode.VIEWER_FORBIDDEN


class ViewerDenied(RelaydeskError):
    """The viewer token does not grant access to this desktop session (401 once expired)."""

    code = ErrorCode.FORBIDDEN

    def __init__(self, denial: Denial) -> None:
        self.denial = denial
        self.status = 401 if denial is Denial.EXPIRED else 403
        super().__init__(f"viewer access denied: {denial.value}")


@dataclass(frozen=True)
class ViewerGrant:
    """What a verified token grants."""

    user_id: str
    conversation_id: str
    relay_id: str
    desktop_session_id: str
    expires_at: int
    # A person's viewer (input allowed, and it counts as theirs); False: view only.
    person: bool = False
    # The credential that minted it (``server.auth.revocation.minted_ref``); "": its user only.
    minted_by: str = ""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


_B64URL = re.compile(r"[A-Za-z0-9_-]+")


def _unb64(text: str) -> bytes:
    """Strict unpadded base64url: one spelling per token (no padding, no stray characters)."""
    if not _B64URL.fullmatch(text) or len(text) % 4 == 1:
        raise ValueError("not unpadded base64url")
    data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if _b64(data) != text:
        raise ValueError("not the canonical encoding")
    return data


def _signature(key: str, payload: bytes) -> bytes:
    return hmac.new(key.encode(), _DOMAIN + b"." + payload, hashlib.sha256).digest()


def mint(key: str, grant: ViewerGrant) -> str:
    """A token for ``grant``."""
    payload = json.dumps(
        {
            "u": grant.user_id,
            "c": grant.conversation_id,
            "r": grant.relay_id,
            "s": grant.desktop_session_id,
            "e": grant.expires_at,
            **({"p": 1} if grant.person else {}),
            **({"m": grant.minted_by} if grant.minted_by else {}),
        },
        separators=(",", ":"),
    ).encode()
    return f"{_b64(payload)}.{_b64(_signature(key, payload))}"


def grant_for(
    user_id: str,
    conversation_id: str,
    relay_id: str,
    desktop_session_id: str,
    ttl_s: int,
    *,
    person: bool = False,
    minted_by: str = "",
) -> ViewerGrant:
    """A grant for ``ttl_s`` seconds; ``person``: minted for a person's cookie session;
    ``minted_by``: the credential that minted it."""
    expires_at = int(time.time()) + ttl_s
    return ViewerGrant(
        user_id, conversation_id, relay_id, desktop_session_id, expires_at, person, minted_by
    )


def _decode(token: str) -> tuple[bytes, bytes]:
    body, dot, signature = token.partition(".")
    if not dot or not body or not signature or len(token) > 2048:
        raise ViewerDenied(Denial.MALFORMED)
    try:
        return _unb64(body), _unb64(signature)
    except (binascii.Error, ValueError) as err:
        raise ViewerDenied(Denial.MALFORMED) from err


def verify(key: str, token: str, desktop_session_id: str, now: float | None = None) -> ViewerGrant:
    """The grant in ``token`` if it is genuine, unexpired and for ``desktop_session_id``."""
    payload, signature = _decode(token)
    if not hmac.compare_digest(signature, _signature(key, payload)):
        raise ViewerDenied(Denial.FORGED)
    try:
        data = json.loads(payload)
        grant = ViewerGrant(
            str(data["u"]),
            str(data["c"]),
            str(data["r"]),
            str(data["s"]),
            int(data["e"]),
            data.get("p") == 1,
            str(data.get("m", "")),
        )
    except (ValueError, KeyError, TypeError) as err:
        raise ViewerDenied(Denial.MALFORMED) from err
    if grant.expires_at <= (time.time() if now is None else now):
        raise ViewerDenied(Denial.EXPIRED)
    if not same_text(grant.desktop_session_id, desktop_session_id):
        raise ViewerDenied(Denial.OTHER_SESSION)
    return grant
