"""The home files' actions: list, read, write and delete files in a running desktop's home, as
its user, on every relay (no shell opt-in; docs/files.md).

``desktop_files_list`` and ``desktop_file_read`` need role ``read`` (a ``read`` member may list
and download); ``desktop_file_write`` and ``desktop_file_delete`` need ``write`` and pass the
desktop's control gate like any agent input: a person's takeover refuses them with
``takeover_active``, Stop with ``stopped_by_user`` (docs/control.md). Confinement is the
relay's, checked where each file is opened: a path outside the home, through a symbolic link,
or to a FIFO or device is refused with ``403 path_outside_home``.

Every attempt is audited. The audit row names the file by a hash, never by its name: the
outcome is ``<op>:<16 hex>``, the SHA-256 of the conversation id and the home-relative path,
so rows about the same file in one conversation can be matched without the audit trail
holding file names (the hash does not hide a name that can be guessed).
"""

from __future__ import annotations

import hashlib
from typing import Any, Final, cast

from server.actions.context import ActionContext
from server.actions.desktop import running_row
from server.actions.desktop_tools import TARGET
from server.actions.registry import Action, tool_schema
from server.actions.schema import Schema
from server.control.gate import DesktopTarget, agent_input
from server.db.records import Role
from wire import home_files
from wire.errors import ErrorCode, OpError
from wire.home_files import DESKTOP_HOME_FILE, HomeFileArgs, HomeFileOp, HomeFileResult

# Beyond the request timeout: the relay's own limit on one file operation.
FILE_EXTRA_S: Final = 25.0
HASH_HEX: Final = 16
PATH: Final[Schema] = {
    "type": "string",
    "minLength": 1,
    "maxLength": home_files.PATH_MAX,
    "description": "A path in the desktop's home: relative to it ('Downloads/a.pdf'), or "
    "starting with ~/ or the home's absolute path. '..', symbolic links, FIFOs and devices "
    "are refused (403 path_outside_home).",
}
ENCODING: Final[Schema] = {
    "type": "string",
    "enum": list(home_files.ENCODINGS),
    "default": "utf-8",
    "description": "utf-8: content is text; base64: content is the bytes in base64.",
}
FIELDS: Final = ("path", "offset", "length", "content", "encoding", "append")


def refuse_hidden(role: Role, path: str) -> None:
    """A ``read`` member reads no hidden file or folder (``~/.config``, ``~/.ssh``…): the
    desktop's apps keep their keys and sessions there. Listings leave them out for it too."""
    if role == "read" and home_files.names_hidden(path):
        raise OpError(
            ErrorCode.FORBIDDEN,
            "hidden files and folders (names starting with '.') need role write: the desktop's "
            "apps keep their keys and sessions there",
            {"field": "path"},
        )


def path_hash(conversation_id: str, path: str) -> str:
    """How an audit row names a home-relative path."""
    digest = hashlib.sha256(f"{conversation_id}\x00{path}".encode("utf-8", "surrogatepass"))
    return digest.hexdigest()[:HASH_HEX]


async def _call(ctx: ActionContext, op: HomeFileOp, args: dict[str, Any]) -> HomeFileResult:
    row = await running_row(ctx, args)
    request = cast(
        HomeFileArgs,
        {
            "desktop_session_id": row.desktop_session_id,
            "op": op,
            **{k: args[k] for k in FIELDS if k in args},
        },
    )
    home_files.check_home_file_args(request)
    if op in ("list", "read"):
        refuse_hidden(ctx.role, request["path"])
        answer = await ctx.relay_call(DESKTOP_HOME_FILE, request, FILE_EXTRA_S)
        if ctx.role == "read" and "entries" in answer:
            answer["entries"] = [e for e in answer["entries"] if not e["name"].startswith(".")]
    else:
        async with agent_input(ctx, DesktopTarget.of_row(row)) as grant:
            answer = await ctx.relay_call(DESKTOP_HOME_FILE, request, FILE_EXTRA_S)
            grant.acted(f"desktop_file_{op}")  # never the path
    ctx.outcome = f"{op}:{path_hash(ctx.conversation_id, answer['path'])}"
    return answer


async def files_list(ctx: ActionContext, args: dict[str, Any]) -> dict[str, Any]:
    return dict(await _call(ctx, "list", args))


async def file_read(ctx: ActionContext, args: dict[str, Any]) -> dict[str, Any]:
    return dict(await _call(ctx, "read", args))


async def file_write(ctx: ActionContext, args: dict[str, Any]) -> dict[str, Any]:
    return dict(await _call(ctx, "write", args))


async def file_delete(ctx: ActionContext, args: dict[str, Any]) -> dict[str, Any]:
    return dict(await _call(ctx, "delete", args))


def _schema(extra: dict[str, Schema], required: tuple[str, ...] = ("path",)) -> Schema:
    return tool_schema({**TARGET, "path": PATH, **extra}, required)


HOME_FILE_ACTIONS: Final[tuple[Action, ...]] = (
    Action(
        "desktop_files_list",
        "read",
        _schema({"path": {**PATH, "default": "~"}}, ()),
        "List a folder in a running desktop's home (the home itself by default), as the "
        "desktop's user: entries {name, type (file, dir, link: never followed, other), size, "
        f"mtime (Unix seconds)}} sorted by name, at most {home_files.LIST_MAX} (truncated says "
        "when the folder holds more), and path (home-relative).",
        files_list,
        audit_op="desktop.files_list",
        read_only=True,
    ),
    Action(
        "desktop_file_read",
        "read",
        _schema(
            {
                "offset": {
                    "type": "integer",
                    "minimum": 0,
                    "default": 0,
                    "description": "Start reading here (bytes).",
                },
                "length": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": home_files.READ_MAX,
                    "description": f"Read at most this many bytes (default and most: "
                    f"{home_files.READ_MAX}).",
                },
                "encoding": {
                    **ENCODING,
                    "description": "utf-8: answer content as text (refused "
                    "with 422 when the bytes are not UTF-8); base64: answer content_b64.",
                },
            }
        ),
        "Read a part of a regular file in a running desktop's home, as the desktop's user: "
        "content (or content_b64), offset, size (the whole file's) and eof. Larger files: "
        "read in parts with offset and length, or download them (docs/files.md).",
        file_read,
        audit_op="desktop.file_read",
        read_only=True,
    ),
    Action(
        "desktop_file_write",
        "write",
        _schema(
            {
                "content": {
                    "type": "string",
                    "maxLength": home_files.CONTENT_MAX,
                    "description": "The file's new content (text, or base64 bytes).",
                },
                "encoding": ENCODING,
                "append": {
                    "type": "boolean",
                    "default": False,
                    "description": "Append to the file (created when missing) instead of "
                    "replacing it.",
                },
            },
            ("path", "content"),
        ),
        "Write a file in a running desktop's home, as the desktop's user, replacing it whole "
        "(written beside it, then renamed over it; missing folders are created), or append "
        "to it; answers size (the file's). Files larger than RELAYDESK_FILE_MAX_MB are "
        "refused with 413 file_too_large.",
        file_write,
        audit_op="desktop.file_write",
    ),
    Action(
        "desktop_file_delete",
        "write",
        _schema({}),
        "Delete a file or an empty folder in a running desktop's home, as the desktop's user "
        "(a symbolic link is removed itself, never what it points to).",
        file_delete,
        audit_op="desktop.file_delete",
    ),
)
