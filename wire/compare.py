"""Constant-time comparison of secrets and identifiers, always on bytes.

``hmac.compare_digest`` on two ``str`` raises ``TypeError`` as soon as either holds a
non-ASCII character, so a session id or token typed by anybody must be encoded first; lone
surrogates (which JSON escapes can carry) are encoded too rather than raising.
"""

from __future__ import annotations

import hmac


def _bytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def same_text(given: str, expected: str) -> bool:
    """Whether ``given`` equals ``expected``, in time independent of where they differ."""
    return hmac.compare_digest(_bytes(given), _bytes(expected))
