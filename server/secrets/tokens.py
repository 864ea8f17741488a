"""Bearer secrets: generation, hashing for storage, constant-time comparison.

Every secret is 32 random bytes behind a short prefix that says what it is for, so a
leaked string is recognisable (``rdk_`` API token, ``rdr_`` relay token, ``rdl_`` login
link, ``rds_`` web session). They are high-entropy, so one SHA-256 is enough to store them.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import uuid
from typing import Final

API_TOKEN_PREFIX: Final = "rdk_"  # noqa: S105 (a prefix, not a secret)
RELAY_TOKEN_PREFIX: Final = "rdr_"  # noqa: S105
LOGIN_LINK_PREFIX: Final = "rdl_"
SESSION_PREFIX: Final = "rds_"
TOKEN_BYTES: Final = 32
# A secret longer than this is not one of ours; refuse it before hashing.
MAX_SECRET_LEN: Final = 128


def new_secret(prefix: str) -> str:
    return prefix + secrets.token_urlsafe(TOKEN_BYTES)


def hash_secret(secret: str) -> str:
    """SHA-256 hex digest used as the stored form of a secret."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def looks_like(secret: str, prefix: str) -> bool:
    """Cheap shape check before any database lookup."""
    return secret.startswith(prefix) and len(secret) <= MAX_SECRET_LEN


def csrf_token_for(session_secret: str) -> str:
    """The CSRF token of a web session, derived so that nothing about it is stored."""
    digest = hmac.new(session_secret.encode("utf-8"), b"relaydesk-csrf-v1", hashlib.sha256)
    return digest.hexdigest()


def same_secret(given: str, expected: str) -> bool:
    """Constant-time string comparison."""
    return hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8"))


def new_id() -> str:
    return uuid.uuid4().hex
