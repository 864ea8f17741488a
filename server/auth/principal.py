"""Who is making a request, once authenticated."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from wire.ids import UserId

AuthMethod = Literal["cookie", "token"]


@dataclass(frozen=True)
class Principal:
    """An authenticated user and how they proved it.

    ``csrf_token`` is set for cookie sessions only, so ``/api/v1/me`` can hand it to the page.
    ``secret_hash`` is the SHA-256 of the token or session secret presented: open streams
    re-check it (``server.auth.revocation``). ``read_only`` and ``conversation_scope`` are an
    API token's scopes.
    """

    user_id: UserId
    username: str
    is_admin: bool
    via: AuthMethod
    csrf_token: str | None = field(default=None, repr=False, compare=False)
    secret_hash: str | None = field(default=None, repr=False, compare=False)
    # An API token's scopes (``server.auth.scopes``): only what role read allows; only this
    # conversation.
    read_only: bool = field(default=False, compare=False)
    conversation_scope: str | None = field(default=None, compare=False)
