"""The desktop tools' actions: windows, the clipboard, and (opt-in on the relay) shell and
file commands in a running virtual desktop, as its user (docs/desktop-tools.md).

``desktop_windows`` and ``desktop_clipboard_get`` read what is on the desktop (role ``write``,
like the screen: window titles and the clipboard are desktop content); ``desktop_window``,
``desktop_clipboard_set``, ``desktop_shell`` and ``desktop_file`` change the desktop (role
``write``, audited) and run under its control gate like any agent input: a person's takeover
refuses them with ``takeover_active``, Stop with ``stopped_by_user`` (docs/control.md). The
relay checks every argument again and answers ``forbidden`` for shell and file commands unless
it was started with ``RELAYDESK_CUA_SHELL=1``.
"""

from __future__ import annotations

from typing import Any, Final, cast

from server.actions.context import ActionContext
from server.actions.desktop import KIND, RELAY, SESSION_ID, SLOT, running_row
from server.actions.registry import Action, tool_schema
from server.actions.schema import Schema
from server.control.gate import DesktopTarget, agent_input
from server.db.rows import DesktopRow
from wire import desktop_tool_args as tool_args
from wire import ops

TARGET: Final[dict[str, Schema]] = {
    "relay": RELAY,
    "kind": KIND,
    "slot": SLOT,
    "desktop_session_id": SESSION_ID,
}
# Beyond the request timeout: a file command's own limit on the relay, and what a shell
# command is given on top of its own.
FILE_EXTRA_S: Final = 25.0
SHELL_EXTRA_S: Final = 10.0
COORD: Final[Schema] = {
    "type": "integer",
    "minimum": tool_args.WINDOW_COORD_MIN,
    "maximum": tool_args.WINDOW_COORD_MAX,
}
SIZE: Final[Schema] = {"type": "integer", "minimum": 1, "maximum": tool_args.WINDOW_SIZE_MAX}


def _session(row: DesktopRow) -> ops.DesktopTargetArgs:
    return {"desktop_session_id": row.desktop_session_id}


async def windows(ctx: ActionContext, args: dict[str, Any]) -> dict[str, Any]:
    row = await running_row(ctx, args)
    answer = await ctx.relay_call(ops.DESKTOP_WINDOWS, _session(row))
    return {
        "desktop_session_id": row.desktop_session_id,
        "windows": answer["windows"],
        "active": answer["active"],
    }


async def window(ctx: ActionContext, args: dict[str, Any]) -> dict[str, Any]:
    tool_args.check_window_args(args)
    row = await running_row(ctx, args)
    fields = {k: args[k] for k in tool_args.WINDOW_OP_FIELDS[args["op"]]}
    request = cast(
        ops.DesktopWindowArgs,
        {
            "desktop_session_id": row.desktop_session_id,
            "window_id": args["window_id"],
            "op": args["op"],
            **fields,
        },
    )
    spot = {k: args[k] for k in ("x", "y") if k in args}
    async with agent_input(ctx, DesktopTarget.of_row(row)) as grant:
        await ctx.relay_call(ops.DESKTOP_WINDOW, request)
        grant.acted(f"desktop_window.{args['op']}", **spot)
    ctx.outcome = str(args["op"])
    return {
        "desktop_session_id": row.desktop_session_id,
        "window_id": args["window_id"],
        "op": args["op"],
        "done": True,
    }


async def clipboard_get(ctx: ActionContext, args: dict[str, Any]) -> dict[str, Any]:
    row = await running_row(ctx, args)
    request = ops.DesktopClipboardArgs(desktop_session_id=row.desktop_session_id, op="get")
    answer = await ctx.relay_call(ops.DESKTOP_CLIPBOARD, request)
    return {
        "desktop_session_id": row.desktop_session_id,
        "text": answer.get("text", ""),
        "truncated": bool(answer.get("truncated")),
    }


async def clipboard_set(ctx: ActionContext, args: dict[str, Any]) -> dict[str, Any]:
    row = await running_row(ctx, args)
    request = ops.DesktopClipboardArgs(
        desktop_session_id=row.desktop_session_id, op="set", text=args["text"]
    )
    async with agent_input(ctx, DesktopTarget.of_row(row)) as grant:
        await ctx.relay_call(ops.DESKTOP_CLIPBOARD, request)
        grant.acted("desktop_clipboard_set")  # never the text
    return {"desktop_session_id": row.desktop_session_id, "set": True}


async def shell(ctx: ActionContext, args: dict[str, Any]) -> dict[str, Any]:
    tool_args.check_shell_args(args)
    row = await running_row(ctx, args)
    timeout_s = float(args["timeout_s"])
    request = ops.DesktopShellArgs(
        desktop_session_id=row.desktop_session_id, command=args["command"], timeout_s=timeout_s
    )
    async with agent_input(ctx, DesktopTarget.of_row(row)) as grant:
        answer = await ctx.relay_call(ops.DESKTOP_SHELL, request, timeout_s + SHELL_EXTRA_S)
        grant.acted("desktop_shell")  # never the command
    ctx.outcome = "timed_out" if answer["timed_out"] else f"exit_{answer['returncode']}"
    return {
        "desktop_session_id": row.desktop_session_id,
        "stdout": answer["stdout"],
        "stderr": answer["stderr"],
        "returncode": answer["returncode"],
        "timed_out": answer["timed_out"],
        "truncated": answer["truncated"],
    }


FILE_ARGS: Final = ("op", "path", "content", "append", "offset", "length")


async def file(ctx: ActionContext, args: dict[str, Any]) -> dict[str, Any]:
    tool_args.check_file_args(args)
    row = await running_row(ctx, args)
    fields = {k: args[k] for k in FILE_ARGS if k in args}
    request = cast(ops.DesktopFileArgs, {**_session(row), **fields})
    async with agent_input(ctx, DesktopTarget.of_row(row)) as grant:
        answer = await ctx.relay_call(ops.DESKTOP_FILE, request, FILE_EXTRA_S)
        grant.acted(f"desktop_file.{args['op']}")
    ctx.outcome = str(args["op"])
    return {**answer, "desktop_session_id": row.desktop_session_id}


def _schema(extra: dict[str, Schema], required: tuple[str, ...] = ()) -> Schema:
    return tool_schema({**TARGET, **extra}, required)


FILE_DOC: Final = (
    "One file command in a running desktop, as the desktop's user (its permissions; relative "
    "paths from its home). op: read_text → {content}; read_bytes (offset, length) → "
    "{content_b64}; write_text (content) / write_bytes (content: base64), append → {done}; "
    "exists (a file) / dir_exists → {exists}; list_dir → {files}; mkdir (with parents) / "
    "delete_file / delete_dir (empty) → {done}; size → {size}. Reads answer at most "
    f"{tool_args.FILE_READ_MAX} bytes. Only on relays started with RELAYDESK_CUA_SHELL=1."
)

DESKTOP_TOOL_ACTIONS: Final[tuple[Action, ...]] = (
    Action(
        "desktop_windows",
        "write",
        _schema({}),
        "List the top-level windows of a running desktop (from its window manager): id (an "
        "X window id), name (title), pid, app (its WM_CLASS, lower-case), x, y, width, height "
        "(the client area without the frame, in screen pixels), active, minimized; and which "
        "is active.",
        windows,
        read_only=True,
    ),
    Action(
        "desktop_window",
        "write",
        _schema(
            {
                "window_id": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": tool_args.WINDOW_ID_MAX,
                    "description": "A window's id from desktop_windows.",
                },
                "op": {
                    "type": "string",
                    "enum": list(tool_args.WINDOW_OPS),
                    "description": "activate (raise, focus, restore from minimized), close "
                    "(as its close button: the app may ask first), maximize, minimize, move "
                    "(x, y), resize (width, height).",
                },
                "x": {**COORD, "description": "move: the left edge of the window's client area."},
                "y": {**COORD, "description": "move: the top edge of the window's client area."},
                "width": {
                    **SIZE,
                    "description": "resize: the client area's width (the app may "
                    "round it to its size steps).",
                },
                "height": {**SIZE, "description": "resize: the client area's height."},
            },
            ("window_id", "op"),
        ),
        "Manage one top-level window of a running desktop; answers once the window manager "
        "shows the effect (or after at most a second).",
        window,
        audit_op="desktop.window",
    ),
    Action(
        "desktop_clipboard_get",
        "write",
        _schema({}),
        "Read the text on a running desktop's clipboard (the CLIPBOARD selection; '' when "
        f"empty; at most {tool_args.CLIPBOARD_MAX} bytes, truncated says when cut).",
        clipboard_get,
        read_only=True,
    ),
    Action(
        "desktop_clipboard_set",
        "write",
        _schema(
            {
                "text": {
                    "type": "string",
                    "maxLength": tool_args.CLIPBOARD_MAX,
                    "description": "The text to put on the clipboard.",
                }
            },
            ("text",),
        ),
        "Put text on a running desktop's clipboard (the CLIPBOARD selection); its apps paste "
        "it from there.",
        clipboard_set,
        audit_op="desktop.clipboard_set",
    ),
    Action(
        "desktop_shell",
        "write",
        _schema(
            {
                "command": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": tool_args.SHELL_COMMAND_MAX,
                    "description": "Run with /bin/sh -c.",
                },
                "timeout_s": {
                    "type": "number",
                    "minimum": tool_args.SHELL_TIMEOUT_MIN_S,
                    "maximum": tool_args.SHELL_TIMEOUT_MAX_S,
                    "default": 30,
                    "description": "Kill the command (its whole process group) after "
                    "this many seconds.",
                },
            },
            ("command",),
        ),
        "Run a shell command in a running desktop as the desktop's user, in its home, with its "
        "display and session (apps it starts show on the desktop); no input (stdin is "
        "/dev/null). Answers stdout, stderr (each at most 1 MiB; truncated says when cut), "
        "returncode (null when killed at the time limit) and timed_out. Only on relays started "
        "with RELAYDESK_CUA_SHELL=1.",
        shell,
        audit_op="desktop.shell",
        needs="shell",
    ),
    Action(
        "desktop_file",
        "write",
        _schema(
            {
                "op": {
                    "type": "string",
                    "enum": list(tool_args.FILE_OPS),
                    "description": "What to do.",
                },
                "path": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": tool_args.FILE_PATH_MAX,
                    "description": "A path; relative paths and ~ resolve against the "
                    "desktop's home.",
                },
                "content": {
                    "type": "string",
                    "maxLength": tool_args.FILE_CONTENT_MAX,
                    "description": "write_text: the text; write_bytes: the bytes in base64.",
                },
                "append": {
                    "type": "boolean",
                    "description": "write_*: append instead of replacing the file.",
                },
                "offset": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "read_bytes: start here.",
                },
                "length": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": tool_args.FILE_READ_MAX,
                    "description": "read_bytes: read at most this many bytes.",
                },
            },
            ("op", "path"),
        ),
        FILE_DOC,
        file,
        audit_op="desktop.file",
        needs="shell",
    ),
)
