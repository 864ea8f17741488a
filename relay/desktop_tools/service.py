"""``DesktopTools``: the desktop tools as the relay's op handlers call them, on the running
desktop a handler found (docs/desktop-tools.md).

Window and clipboard tools are always there; shell and file commands only on a relay started
with ``RELAYDESK_CUA_SHELL=1`` (refused with ``forbidden`` otherwise, before anything else is
looked at). Every tool's own arguments are checked here again (``wire.desktop_tool_args``),
whatever the server checked.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import time
from typing import Final, cast

from relay.backend import DesktopBackend
from relay.desktop_tools.files import file_command
from relay.desktop_tools.run import run_in_desktop
from relay.desktop_tools.session import DesktopSession, session_of
from relay.desktop_tools.settings import SHELL_ENV, DesktopToolSettings
from wire import desktop_tool_args as tool_args
from wire import ops
from wire.errors import ErrorCode, InvalidArgs, OpError

log = logging.getLogger(__name__)

SHELL: Final = "/bin/sh"
SHELL_CHILD: Final = "shell"
SHELL_OUTPUT_CAP: Final = 1024 * 1024  # each of stdout and stderr
DEFAULT_SHELL_TIMEOUT_S: Final = 30.0
SHELL_OFF: Final = f"shell and file commands are off on this relay: start it with {SHELL_ENV}=1"


class DesktopTools:
    """Windows, clipboard, shell and files of a relay's virtual desktops."""

    def __init__(self, settings: DesktopToolSettings | None = None) -> None:
        self.settings = settings or DesktopToolSettings()

    def capabilities(self) -> list[str]:
        """``shell`` when shell and file commands are on; ``denied_apps`` when the relay
        denies apps to agents (the server keeps agents' viewers off its desktops)."""
        caps = ["shell"] if self.settings.cua_shell else []
        if self.settings.denied:
            caps.append(ops.DENIED_APPS_CAPABILITY)
        return caps

    def require_shell(self) -> None:
        """``forbidden`` unless shell and file commands are on."""
        if not self.settings.cua_shell:
            raise OpError(ErrorCode.FORBIDDEN, SHELL_OFF, {"setting": SHELL_ENV})

    # The window and clipboard modules (python-xlib) load with their first use, not at relay
    # start.

    async def windows(self, backend: DesktopBackend, row: ops.RelayRow) -> ops.DesktopWindowsResult:
        from relay.desktop_tools.windows import list_windows

        session = await session_of(backend, row)
        windows, active = await asyncio.to_thread(
            list_windows, session.display, self.settings.denied
        )
        return {
            "desktop_session_id": session.desktop_session_id,
            "windows": windows,
            "active": active,
        }

    async def window(
        self, backend: DesktopBackend, row: ops.RelayRow, args: ops.DesktopWindowArgs
    ) -> ops.DesktopWindowResult:
        from relay.desktop_tools.windows import apply

        tool_args.check_window_args(args)
        session = await session_of(backend, row)
        op, window_id = args["op"], args["window_id"]
        fields = tool_args.WINDOW_OP_FIELDS[op]
        # check_args made them integers
        values = {name: cast(int, value) for name, value in args.items() if name in fields}
        await asyncio.to_thread(apply, session.display, window_id, op, values, self.settings.denied)
        return {
            "desktop_session_id": session.desktop_session_id,
            "window_id": window_id,
            "op": op,
            "done": True,
        }

    async def clipboard(
        self, backend: DesktopBackend, row: ops.RelayRow, args: ops.DesktopClipboardArgs
    ) -> ops.DesktopClipboardResult:
        from relay.desktop_tools.clipboard import read_png, read_text, set_png, set_text

        tool_args.check_clipboard_args(args)
        session = await session_of(backend, row)
        sid = session.desktop_session_id
        op, denied = args["op"], self.settings.denied
        if op == "set":
            await set_text(session, args["text"], denied)
            return {"desktop_session_id": sid, "set": True}
        if op == "set_png":
            await set_png(session, _png(args["png_b64"]), denied)
            return {"desktop_session_id": sid, "set": True}
        if op == "get_png":
            png = await read_png(session, denied)
            if png is None:
                return {"desktop_session_id": sid}
            return {"desktop_session_id": sid, "png_b64": base64.b64encode(png).decode("ascii")}
        text, truncated = await read_text(session, denied)
        return {
            "desktop_session_id": session.desktop_session_id,
            "text": text,
            "truncated": truncated,
        }

    async def shell(
        self, backend: DesktopBackend, row: ops.RelayRow, args: ops.DesktopShellArgs
    ) -> ops.DesktopShellResult:
        self.require_shell()
        tool_args.check_shell_args(args)
        session = await session_of(backend, row)
        timeout_s = float(args.get("timeout_s", DEFAULT_SHELL_TIMEOUT_S))
        started = time.monotonic()
        done = await run_in_desktop(
            session,
            SHELL_CHILD,
            [SHELL, "-c", args["command"]],
            timeout_s=timeout_s,
            cap=SHELL_OUTPUT_CAP,
        )
        _log_command(session, "shell command", done.returncode, time.monotonic() - started)
        return {
            "desktop_session_id": session.desktop_session_id,
            "stdout": done.stdout.text(),
            "stderr": done.stderr.text(),
            "returncode": done.returncode,
            "timed_out": done.timed_out,
            "truncated": done.truncated,
        }

    async def file(
        self, backend: DesktopBackend, row: ops.RelayRow, args: ops.DesktopFileArgs
    ) -> ops.DesktopFileResult:
        self.require_shell()
        tool_args.check_file_args(args)
        session = await session_of(backend, row)
        return await file_command(session, args)


def _png(png_b64: str) -> bytes:
    try:
        return base64.b64decode(png_b64, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidArgs("png_b64", "not base64") from None


def _log_command(session: DesktopSession, what: str, code: int | None, took_s: float) -> None:
    # Never the command itself: it may carry secrets (the server's audit row says who ran it).
    ended = "killed at its time limit" if code is None else f"exit status {code}"
    log.info(
        "%s in desktop %s as %s: %s after %.1f s",
        what,
        session.display,
        session.user_name or "the relay's user",
        ended,
        took_s,
    )
