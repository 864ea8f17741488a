"""Open streams lose their access when their credential does: one watch per connection.

Every long-lived connection (the event stream, Cua's WebSocket, a viewer or audio WebSocket, an
MCP call) registers a :class:`Watch` naming the credential it was admitted with (an API token,
a web session — for a viewer capability, the one that minted it, or only its user when the
capability names none) and the access it needs (a role in a
conversation, a relay still shared there). :class:`CredentialWatch` re-checks every watch of
this process every ``RECHECK_S`` and at once when a write or another replica's notice clears
the token, role or relay caches (``server.db.invalidation``). Credentials are read straight
from the database in one batched query per kind (``server.db.liveness``), never from a read
cache, so a revocation made anywhere — the admin CLI, any replica — ends every stream that
used it within ``RECHECK_S`` plus one query. A watch that fails is marked revoked with a reason;
its connection closes itself (docs/security.md, "Revocation and its bounds").
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import AsyncIterator, Callable, Collection, Iterable
from dataclasses import dataclass
from typing import Final, Literal, Protocol

from server.auth.principal import Principal
from server.db.records import Role, role_allows
from server.tasks import cancel_and_wait

log = logging.getLogger(__name__)

RECHECK_S: Final = 1.0
# How a viewer capability names the credential that minted it: a kind letter and this many hex
# digits of a one-way hash of the credential's secret hash (never the secret, never the hash).
MINTED_REF_HEX: Final = 24
_MINTED_DOMAIN: Final = "relaydesk.viewer.minted.v1:"
# Clearing these caches means a credential, a role or a share may have been taken away.
WAKING_CACHES: Final = frozenset({"token", "role", "relay"})

CredentialKind = Literal["token", "session", "user"]
REVOKED: Final[dict[CredentialKind, str]] = {
    "token": "API token revoked or its user disabled",
    "session": "signed out, session expired or user disabled",
    "user": "user disabled",
}


@dataclass(frozen=True)
class Credential:
    """What proved who a connection is: an API token or web session (by the SHA-256 of its
    secret), or only a user (a viewer capability that names no minting credential)."""

    kind: CredentialKind
    user_id: str
    secret_hash: str = ""

    @classmethod
    def of(cls, principal: Principal) -> Credential:
        """The credential an authenticated request presented."""
        if principal.secret_hash is None:
            return cls("user", principal.user_id)
        kind: CredentialKind = "token" if principal.via == "token" else "session"
        return cls(kind, principal.user_id, principal.secret_hash)


@dataclass(frozen=True)
class Access:
    """What the connection needs besides its credential: a role in a conversation and,
    for viewers, its relay still shared with that conversation."""

    conversation_id: str
    role: Role
    relay_id: str | None = None


class LiveCredentials(Protocol):
    """The ``Store`` reads a check needs (``server.db.liveness`` and the cached role reads)."""

    async def live_api_tokens(self, token_hashes: Collection[str]) -> set[str]: ...

    async def live_web_sessions(self, secret_hashes: Collection[str]) -> set[str]: ...

    async def enabled_users(self, user_ids: Collection[str]) -> set[str]: ...

    async def get_role(self, conversation_id: str, user_id: str) -> Role | None: ...

    async def is_relay_visible(self, relay_id: str, conversation_id: str) -> bool: ...


class MintingCredentials(Protocol):
    """The ``Store`` read that resolves a viewer capability's minting credential."""

    async def live_secret_hashes(self, user_id: str) -> tuple[set[str], set[str]]: ...


def _ref(secret_hash: str) -> str:
    digest = hashlib.sha256((_MINTED_DOMAIN + secret_hash).encode()).hexdigest()
    return digest[:MINTED_REF_HEX]


def minted_ref(principal: Principal) -> str:
    """What a viewer capability minted for ``principal`` carries to name its credential
    (``t.<ref>`` for an API token, ``s.<ref>`` for a web session; "" when there is none)."""
    if principal.secret_hash is None:
        return ""
    kind = "t" if principal.via == "token" else "s"
    return f"{kind}.{_ref(principal.secret_hash)}"


async def minted_credential(store: MintingCredentials, user_id: str, minted_by: str) -> Credential:
    """The credential a viewer capability's streams are watched under: the live token or
    session ``minted_by`` names, or — when none still lives — one that no check finds live
    (it is revoked at once); a capability that names none is watched under its user."""
    kind_letter, _, ref = minted_by.partition(".")
    if kind_letter not in ("t", "s") or not ref:
        return Credential("user", user_id)
    kind: CredentialKind = "token" if kind_letter == "t" else "session"
    tokens, sessions = await store.live_secret_hashes(user_id)
    for secret_hash in tokens if kind == "token" else sessions:
        if _ref(secret_hash) == ref:
            return Credential(kind, user_id, secret_hash)
    return Credential(kind, user_id)


class Watch:
    """One open connection's credential and access; ``revoked`` is set once either is gone."""

    def __init__(self, credential: Credential, access: Access | None) -> None:
        self.credential = credential
        self.access = access
        self.revoked = asyncio.Event()
        self.reason = ""

    def revoke(self, reason: str) -> None:
        if not self.revoked.is_set():
            self.reason = reason
            self.revoked.set()

    async def wait(self) -> str:
        """The reason, once the connection must end."""
        await self.revoked.wait()
        return self.reason


class CredentialWatch:
    """Every watch of this process, re-checked together (see the module docstring)."""

    def __init__(self, store: LiveCredentials, interval_s: float = RECHECK_S) -> None:
        self._store = store
        self.interval_s = interval_s
        self._watches: set[Watch] = set()
        self._wake = asyncio.Event()

    def __len__(self) -> int:
        return len(self._watches)

    def add(self, credential: Credential, access: Access | None = None) -> Watch:
        """A watch, checked until :meth:`discard`."""
        watch = Watch(credential, access)
        self._watches.add(watch)
        return watch

    def discard(self, watch: Watch) -> None:
        self._watches.discard(watch)

    def caches_cleared(self, names: frozenset[str]) -> None:
        """Store cache listener: a revocation may have happened here or on another replica."""
        if names & WAKING_CACHES:
            self._wake.set()

    async def confirm(self, watch: Watch) -> bool:
        """Check one watch now, uncached (before an action a revoked caller must not run)."""
        if not watch.revoked.is_set():
            await self.check([watch])
        return not watch.revoked.is_set()

    async def credential_lives(self, credential: Credential) -> bool:
        """Whether ``credential`` is good now, uncached (its access is not looked at)."""
        return credential in await self._live_credentials([credential])

    async def check(self, watches: Iterable[Watch]) -> None:
        """Revoke each watch whose credential or access is gone."""
        pending = [w for w in watches if not w.revoked.is_set()]
        if not pending:
            return
        live = await self._live_credentials([w.credential for w in pending])
        for watch in pending:
            if watch.credential not in live:
                watch.revoke(REVOKED[watch.credential.kind])
        await self._check_access([w for w in pending if not w.revoked.is_set()])

    async def _live_credentials(self, credentials: list[Credential]) -> set[Credential]:
        def of(kind: CredentialKind) -> set[str]:
            return {
                c.user_id if kind == "user" else c.secret_hash
                for c in credentials
                if c.kind == kind
            }

        tokens, sessions, users = of("token"), of("session"), of("user")
        live_tokens = await self._store.live_api_tokens(tokens) if tokens else set()
        live_sessions = await self._store.live_web_sessions(sessions) if sessions else set()
        live_users = await self._store.enabled_users(users) if users else set()
        return {
            c
            for c in credentials
            if (c.kind == "token" and c.secret_hash in live_tokens)
            or (c.kind == "session" and c.secret_hash in live_sessions)
            or (c.kind == "user" and c.user_id in live_users)
        }

    async def _check_access(self, watches: list[Watch]) -> None:
        verdicts: dict[tuple[str, Access], str | None] = {}
        for watch in watches:
            if watch.access is None:
                continue
            key = (watch.credential.user_id, watch.access)
            if key not in verdicts:
                verdicts[key] = await self._refusal(*key)
            if (reason := verdicts[key]) is not None:
                watch.revoke(reason)

    async def _refusal(self, user_id: str, access: Access) -> str | None:
        role = await self._store.get_role(access.conversation_id, user_id)
        if not role_allows(role, access.role):
            return f"no longer a member of this conversation with role {access.role}"
        relay = access.relay_id
        if relay is not None and not await self._store.is_relay_visible(
            relay, access.conversation_id
        ):
            return "the relay is no longer shared with this conversation"
        return None

    async def run(self) -> None:
        """Check every watch each ``interval_s``, and at once when woken, until cancelled."""
        failing = False
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.interval_s)
            self._wake.clear()
            try:
                await self.check(list(self._watches))
            except Exception:
                # The database did not answer: streams stay open until a check can be made.
                # Logged once per outage with its traceback, not every second.
                if not failing:
                    log.exception("re-checking the credentials of open streams failed")
                failing = True
                continue
            if failing:
                log.info("re-checking the credentials of open streams works again")
            failing = False


@contextlib.asynccontextmanager
async def credential_watch(
    store: LiveCredentials, listeners: list[Callable[[frozenset[str]], None]]
) -> AsyncIterator[CredentialWatch]:
    """A running :class:`CredentialWatch`, woken by the store's cache clears (``listeners``
    is the store's ``cache_listeners``), for the life of the block (the app's lifespan)."""
    watch = CredentialWatch(store)
    listeners.append(watch.caches_cleared)
    task = asyncio.create_task(watch.run(), name="credential-watch")
    try:
        yield watch
    finally:
        listeners.remove(watch.caches_cleared)
        await cancel_and_wait(task)
