"""Audit rows of agent grants: created, revoked (Stop), refused, expired.

One row per event (``op: agent.grant``) and one ``[desktop-audit]`` log line, with the actor
(the agent, or the person who stopped it), the reason and the grant's shape; never a token.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Protocol

from server.control.model import DesktopKey, Grant
from server.db.audit import AuditRow

log = logging.getLogger("relaydesk.audit")

OP = "agent.grant"


class AuditQueue(Protocol):
    """The ``Store`` method that queues an audit row (committed in order, in batches)."""

    async def queue_audit(self, row: AuditRow) -> None: ...


@dataclass(frozen=True)
class AuditContext:
    """The request an audit row belongs to (absent for expiry found by a timer)."""

    conversation_id: str | None = None
    source: str | None = None
    request_id: str | None = None


def grant_details(grant: Grant) -> dict[str, Any]:
    return {
        "agent": grant.agent_name,
        "grant_id": grant.grant_id,
        "scope": grant.scope,
        "window_id": grant.window_id,
        "actions": grant.actions,
        "budget": grant.budget,
        "idle_s": grant.idle_s,
    }


class GrantAudit:
    """Writes the grant rows through the store's audit queue."""

    def __init__(self, queue: AuditQueue) -> None:
        self._queue = queue

    async def record(
        self,
        outcome: str,
        key: DesktopKey,
        actor: str,
        details: dict[str, Any],
        reason: str | None = None,
        context: AuditContext | None = None,
    ) -> None:
        context = context or AuditContext()
        try:
            await self._queue.queue_audit(
                AuditRow(
                    op=OP,
                    actor=actor,
                    outcome=outcome,
                    conversation_id=context.conversation_id,
                    relay_id=key.relay_id,
                    desktop_session_id=key.desktop_session_id,
                    reason=reason,
                    source=context.source,
                    request_id=context.request_id,
                    details=details,
                )
            )
        except Exception:
            log.exception("cannot write the %s row of %s", OP, outcome)
            return
        log.info(
            "[desktop-audit] op=%s actor=%s relay=%s session=%s outcome=%s reason=%s agent=%s",
            OP,
            actor.replace(" ", "_"),
            key.relay_id,
            key.desktop_session_id,
            outcome,
            reason or "-",
            str(details.get("agent") or "-").replace(" ", "_"),
        )
