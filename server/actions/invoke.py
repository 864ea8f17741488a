"""``invoke``: the one path every action call takes (HTTP, chat slash commands, screen tool).

Order: known action → JSON object → ``conversation_id`` → role → schema → handler. Audited
actions write one audit row per attempt, whatever its outcome.
"""

from __future__ import annotations

import logging
import re
import secrets
import time
from collections.abc import Mapping
from typing import Any, Final

from server.actions import audit
from server.actions.context import ActionContext, ActionParts
from server.actions.registry import CONVERSATION_ID, Action, ActionRegistry
from server.actions.schema import validate, with_defaults
from server.auth.principal import Principal
from server.auth.scopes import scope_refusal, scoped_role
from server.db.records import role_allows
from server.errors import error_body, internal_error, status_of
from server.instruments import ACTION_SECONDS
from wire.errors import (
    BodyTooLarge,
    ErrorCode,
    InvalidArgs,
    OpError,
    RelaydeskError,
    RequestRejected,
)
from wire.jsonbody import parse_json_object

log = logging.getLogger(__name__)

REQUEST_ID_RE: Final = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
OUTCOMES: Final[dict[ErrorCode, str]] = {ErrorCode.SESSION_CONFLICT: "conflict"}


Body = bytes | str | Mapping[str, Any] | RequestRejected | None
"""Raw JSON, a parsed mapping, or the boundary's refusal of the HTTP body (audited like others)."""


def request_id_from(candidate: str | None) -> str:
    """The caller's request id when it is a sane token, else a fresh one."""
    if candidate and REQUEST_ID_RE.fullmatch(candidate):
        return candidate
    return secrets.token_hex(8)


def _parse_body(body: Body, limit: int) -> dict[str, Any]:
    if isinstance(body, RequestRejected):
        raise body
    if isinstance(body, str):
        body = body.encode("utf-8", "surrogatepass")
    if isinstance(body, bytes):
        if len(body) > limit:
            raise BodyTooLarge(limit)
        return parse_json_object(body)
    if not isinstance(body, Mapping):
        raise InvalidArgs("body", "must be a JSON object")
    return dict(body)


async def _admit(action: Action, ctx: ActionContext, body: Body) -> dict[str, Any]:
    """Parse, find the conversation and the caller's role, check the schema."""
    args = _parse_body(body, ctx.settings.max_body_bytes)
    conversation_id = args.get("conversation_id")
    if not isinstance(conversation_id, str) or not conversation_id:
        raise InvalidArgs("conversation_id", "required (a string)")
    # Checked before it is looked up or audited: the audit column holds only a real id.
    validate(CONVERSATION_ID, conversation_id, "conversation_id")
    ctx.conversation_id = conversation_id
    if (why := scope_refusal(ctx.principal, conversation_id, action.role)) is not None:
        raise OpError(ErrorCode.FORBIDDEN, f"{action.name}: {why}")
    held = await ctx.store.get_role(conversation_id, ctx.principal.user_id)
    role = scoped_role(ctx.principal, conversation_id, held)
    if not role_allows(role, action.role):
        raise OpError(ErrorCode.FORBIDDEN, f"{action.name} needs role {action.role} here")
    if role is not None:
        ctx.role = role
    validate(action.json_schema, args)
    return with_defaults(action.json_schema, args)


async def _run(action: Action, ctx: ActionContext, body: Body) -> tuple[int, dict[str, Any]]:
    try:
        result = await action.handler(ctx, await _admit(action, ctx, body))
    except RelaydeskError as err:  # an OpError, or the store's (a database that went away)
        await _audit(action, ctx, OUTCOMES.get(err.code, err.code.value), err.message)
        return status_of(err), error_body(err)
    except Exception:
        log.exception("action %s failed (request %s)", action.name, ctx.request_id)
        await _audit(action, ctx, "failed", "internal error")
        return 500, error_body(internal_error())
    await _audit(action, ctx, ctx.outcome, None)
    return 200, {"ok": True, **result}


async def _audit(action: Action, ctx: ActionContext, outcome: str, reason: str | None) -> None:
    if action.audit_op is None:
        return
    try:
        await audit.record(ctx, action.audit_op, outcome, reason)
    except Exception:
        log.exception("cannot write the audit row of %s", action.name)


def unknown_action(registry: ActionRegistry, name: str) -> tuple[int, dict[str, Any]]:
    err = OpError(
        ErrorCode.NOT_FOUND, f"unknown action {name[:64]!r}", {"actions": registry.names()}
    )
    return status_of(err), error_body(err)


class ActionRunner:
    """Runs the registry's actions over the server's parts: the one door of every caller."""

    def __init__(self, registry: ActionRegistry, parts: ActionParts) -> None:
        self.registry = registry
        self.parts = parts

    @property
    def max_body_bytes(self) -> int:
        return self.parts.settings.max_body_bytes

    async def invoke(
        self,
        principal: Principal,
        name: str,
        body: Body,
        *,
        source: str = "api",
        request_id: str | None = None,
    ) -> tuple[int, dict[str, Any]]:
        """Run action ``name`` for ``principal``; returns ``(http_status, json_body)``.

        ``body`` is the raw JSON (bytes/str), an already parsed mapping, or the HTTP boundary's
        refusal of the body (``RequestRejected``, answered with its status); it must carry
        ``conversation_id``. Never raises for a caller's mistake: errors come back as
        ``{ok: false, error: {code, message}}`` with their status.
        """
        action = self.registry.get(name)
        if action is None:
            return unknown_action(self.registry, name)
        ctx = ActionContext(
            self.parts, principal, "", "read", source, request_id or request_id_from(None)
        )
        started = time.perf_counter()
        try:
            return await _run(action, ctx, body)
        finally:
            ACTION_SECONDS.labels(action.name).observe(time.perf_counter() - started)
