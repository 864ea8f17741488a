"""The desktop audit trail: one row and one ``[desktop-audit]`` log line per attempt.

Only ids, names, outcomes and short reasons are written; reasons are scrubbed of anything
that looks like a token or a host path before they reach the row or the line.
"""

from __future__ import annotations

import logging
import re
from typing import Final

from server.actions.context import ActionContext
from server.db.audit import AuditRow

log = logging.getLogger("relaydesk.audit")

MAX_REASON: Final = 200
_SECRETISH: Final = re.compile(
    r"\b(rd[klrs]_[A-Za-z0-9_-]+|[A-Za-z0-9_-]{20,}\.[A-Za-z0-9_-]{20,})"
)
_PATHISH: Final = re.compile(r"(?<![\w.])/[\w.@+-]+(?:/[\w.@+-]*)+")


def scrub(reason: str | None) -> str | None:
    """``reason`` without token-like strings or host paths, at most 200 characters."""
    if not reason:
        return None
    clean = _PATHISH.sub("<path>", _SECRETISH.sub("<secret>", reason))
    return " ".join(clean.split())[:MAX_REASON]


def _value(text: str | None) -> str:
    return "-" if not text else re.sub(r"\s+", "_", text)


async def record(ctx: ActionContext, op: str, outcome: str, reason: str | None = None) -> None:
    """Queue the audit row (committed in order by the store's writer) and log its line."""
    reason = scrub(reason)
    await ctx.store.queue_audit(
        AuditRow(
            op=op,
            actor=ctx.principal.username,
            outcome=outcome,
            conversation_id=ctx.conversation_id or None,
            relay_id=ctx.relay.relay_id if ctx.relay else None,
            desktop_session_id=ctx.desktop_session_id,
            reason=reason,
            source=ctx.source,
            request_id=ctx.request_id,
        )
    )
    log.info(
        "[desktop-audit] op=%s actor=%s relay=%s session=%s outcome=%s reason=%s",
        op,
        _value(ctx.principal.username),
        _value(ctx.relay.name if ctx.relay else None),
        _value(ctx.desktop_session_id),
        outcome,
        '"' + reason.replace('"', "'") + '"' if reason else "-",
    )
