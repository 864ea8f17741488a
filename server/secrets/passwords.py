"""Password hashing with argon2id; hashing and verifying run off the event loop."""

from __future__ import annotations

import asyncio
import secrets

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError


def default_hasher() -> PasswordHasher:
    """argon2id with the RFC 9106 low-memory profile (argon2-cffi's defaults)."""
    return PasswordHasher()


def fast_hasher() -> PasswordHasher:
    """A deliberately cheap argon2id for tests only; never use it for real accounts."""
    return PasswordHasher(time_cost=1, memory_cost=64, parallelism=1)


class Passwords:
    """Hashes and verifies passwords with one ``PasswordHasher``.

    ``verify`` does the same argon2 work whether or not a hash is given, so an unknown
    username cannot be told from a wrong password by timing.
    """

    def __init__(self, hasher: PasswordHasher | None = None) -> None:
        self._hasher = hasher or default_hasher()
        self._dummy_hash: str | None = None

    async def hash(self, password: str) -> str:
        return await asyncio.to_thread(self._hasher.hash, password)

    async def verify(self, stored_hash: str | None, password: str) -> bool:
        """True when ``password`` matches ``stored_hash`` (None: always False, same cost)."""
        if stored_hash is None:
            await asyncio.to_thread(self._verify, await self._dummy(), password)
            return False
        return await asyncio.to_thread(self._verify, stored_hash, password)

    def needs_rehash(self, stored_hash: str) -> bool:
        return self._hasher.check_needs_rehash(stored_hash)

    def _verify(self, stored_hash: str, password: str) -> bool:
        try:
            return self._hasher.verify(stored_hash, password)
        except (VerificationError, InvalidHashError):
            return False

    async def _dummy(self) -> str:
        if self._dummy_hash is None:
            self._dummy_hash = await self.hash(secrets.token_urlsafe(16))
        return self._dummy_hash
