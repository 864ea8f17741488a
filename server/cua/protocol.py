"""Cua's computer-server protocol as its client expects it (pure: names, framing, replies).

Cua's client (``cua-computer``) sends ``{"command": name, "params": {...}}`` to ``POST /cmd``
and reads one ``data: {json}`` line back; anything that is not a ``data:`` line sends it to its
``/ws`` fallback. So every answer to a known command, a failure included, is a ``data:`` line
with ``success``. Only an unknown command is an HTTP error (400 with a did-you-mean), as in
Cua's own server. On ``/ws`` each command gets one JSON reply, in order.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Final

from wire.errors import ErrorCode, OpError

PROTOCOL_VERSION: Final = 1
# Cua's own aliases, and a few of its client's other spellings.
ALIASES: Final[Mapping[str, str]] = {
    "type": "type_text",
    "key": "press_key",
    "press": "press_key",
    "tap": "left_click",
    "click": "left_click",
    "shell": "run_command",
    "exec": "run_command",
    "read_file": "read_text",
    "write_file": "write_text",
    "ls": "list_dir",
    "mkdir": "create_dir",
    "rm": "delete_file",
    "rmdir": "delete_dir",
}
MAX_COMMAND_NAME: Final = 64
# Error codes a person's takeover or Stop answers with: Cua's client sees ``takeover: true``.
TAKEOVER_CODES: Final = frozenset({ErrorCode.TAKEOVER_ACTIVE, ErrorCode.STOPPED_BY_USER})


def resolve(name: str) -> str:
    """The canonical command ``name`` stands for (an alias resolved)."""
    return ALIASES.get(name, name)


def suggestions(name: str, known: Iterable[str]) -> list[str]:
    """Up to five known names close to ``name`` (Cua's rule: same first two letters, or
    containing it), then by edit similarity."""
    import difflib

    everything = sorted({*known, *ALIASES})
    lowered = name.lower()
    close = [c for c in everything if c.startswith(lowered[:2]) or (lowered and lowered in c)]
    for similar in difflib.get_close_matches(lowered, everything, n=5, cutoff=0.6):
        if similar not in close:
            close.insert(0, similar)
    return close[:5]


def unknown_command(name: str, known: Iterable[str]) -> str:
    """Cua's wording for an unknown command, with its did-you-mean."""
    message = f"Unknown command: {name[:MAX_COMMAND_NAME]}"
    near = suggestions(name[:MAX_COMMAND_NAME], known)
    return f"{message}. Did you mean: {', '.join(near)}?" if near else message


def success(result: Mapping[str, Any]) -> dict[str, Any]:
    return {"success": True, **result}


def failure(err: OpError) -> dict[str, Any]:
    """A refused or failed command as Cua's client reads it: ``success: false`` and an
    ``error`` string that starts with relaydesk's code (``stale_screen: …``)."""
    reply: dict[str, Any] = {"success": False, "error": f"{err.code.value}: {err.message}"}
    suggestion = err.details.get("suggestion")
    if isinstance(suggestion, str):
        reply["suggestion"] = suggestion
    if err.code in TAKEOVER_CODES:
        reply["takeover"] = True
    return reply


def data_line(reply: Mapping[str, Any]) -> bytes:
    """One ``/cmd`` answer: ``data: {json}`` and a blank line (Cua's server's framing)."""
    return f"data: {json.dumps(reply, ensure_ascii=False)}\n\n".encode()
