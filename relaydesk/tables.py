"""Readable output of the command line: aligned tables for lists, ``key: value`` otherwise."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

# Columns each listing shows, in order; ``--json`` prints every field.
COLUMNS: Final[dict[str, tuple[str, ...]]] = {
    "users": ("username", "user_id", "is_admin", "disabled", "created_at"),
    "relays": (
        "name",
        "relay_id",
        "connected",
        "co_located",
        "revoked",
        "last_seen_at",
        "relay_version",
    ),
    "conversations": ("title", "conversation_id", "members", "relays"),
    "list-tokens": (
        "token_id",
        "name",
        "user",
        "read_only",
        "conversation",
        "expires_at",
        "last_used_at",
        "revoked",
    ),
    "audit": ("at", "op", "actor", "outcome", "relay_id", "desktop_session_id", "reason"),
    "desktops": (
        "relay_name",
        "kind",
        "slot",
        "state",
        "desktop_session_id",
        "started_by",
        "started_at",
        "reason",
    ),
    "pool": ("relay", "profile", "size", "ready", "starting", "geometry", "hits", "misses"),
}
# What an empty listing says.
NOUNS: Final[dict[str, str]] = {
    "list-tokens": "API tokens",
    "audit": "audit rows (for these filters)",
    "desktops": "desktops running in this conversation",
    "pool": "warm pools on this conversation's relays",
}


def render(command: str, what: str | None, result: Any) -> str:
    """``result`` of ``command`` (``what``: the listing of ``admin list``) as text."""
    name = what or command
    if isinstance(result, list):
        if not result:
            return f"no {NOUNS.get(name, name)}"
        return table(result, COLUMNS.get(name) or tuple(result[0]))
    if isinstance(result, Mapping):
        return fields(result)
    return str(result)


def table(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> str:
    """An aligned table with a header line; the last column is not padded."""
    cells = [[cell(row.get(column)) for column in columns] for row in rows]
    header = [column.upper() for column in columns]
    widths = [max(len(line[i]) for line in [header, *cells]) for i in range(len(columns))]
    lines = [
        "  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip()
        for line in [header, *cells]
    ]
    return "\n".join(lines)


def fields(result: Mapping[str, Any]) -> str:
    """One ``key: value`` line per field, aligned."""
    width = max((len(key) for key in result), default=0)
    return "\n".join(f"{key + ':':<{width + 1}} {cell(value)}" for key, value in result.items())


def cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, Mapping):
        if set(value) == {"username", "role"}:
            return f"{value['username']}:{value['role']}"
        return ",".join(f"{k}={cell(v)}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return ", ".join(cell(v) for v in value) or "-"
    return str(value)
