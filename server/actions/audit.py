"""The desktop audit trail: one row and one ``[desktop-audit]`` log line per attempt.

Only ids, names, outcomes and short reasons are written; reasons are scrubbed of anything
that looks like a token or a host path before they reach the row or the line. An act on an
element (accessibility and browser tools) adds the element it acted on to the row's details:
its role and accessible name, short, and never the text typed or a field's value.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

from server.actions.context import ActionContext
from server.db.audit import AuditRow

log = logging.getLogger("relaydesk.audit")

MAX_REASON: Final = 200
# An element's role and accessible name as the audit row keeps them.
MAX_ROLE: Final = 40
MAX_NAME: Final = 80
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


def element_of(answer: Mapping[str, Any], hidden: Iterable[object] = ()) -> dict[str, str] | None:
    """The element an act's answer names, for its audit row: ``{role, name}``, each one line
    and capped. The name is left out (empty) when it holds any of ``hidden`` (the text typed,
    the value the field holds, which a name computed from content could repeat): an element
    is named by its label, never by what was typed or what a (password) field holds."""
    role, name = answer.get("role"), answer.get("name")
    if not isinstance(role, str) or not role.strip():
        return None
    label = " ".join(name.split()) if isinstance(name, str) else ""
    folded = label.casefold()
    for text in (*hidden, answer.get("value"), answer.get("text")):
        secret = " ".join(text.split()).casefold() if isinstance(text, str) else ""
        if secret and secret in folded:
            label = ""
            break
    return {"role": " ".join(role.split())[:MAX_ROLE], "name": label[:MAX_NAME]}


def act_details(action: str, answer: Mapping[str, Any], args: Mapping[str, Any]) -> dict[str, Any]:
    """An element act's audit details: what was done, the shape of any text, the element."""
    text = args.get("text")
    details: dict[str, Any] = {"action": action}
    if isinstance(text, str):
        details["text_length"] = len(text)
    if (element := element_of(answer, (text,))) is not None:
        details["element"] = element
    return details


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
            details=ctx.details,
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
