"""The desktop's CLIPBOARD selection, read and set with ``xclip`` run as the desktop's user:
text, or a PNG image (``image/png``).

Setting starts an ``xclip`` that keeps serving the text until something else takes the
selection (its own process group, joined to the desktop's: it stops with the desktop at the
latest). Once a new one holds the selection, the servers of earlier sets are stopped and
dropped from the desktop's processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import time
from typing import Final

from Xlib import error as xerror
from Xlib.display import Display

from relay.desktop_tools.run import Completed, run_in_desktop, start_server_in_desktop
from relay.desktop_tools.session import DesktopSession
from relay.policy import DeniedApps
from relay.screen.args import is_display_name
from relay.screen.denied import DeniedWindows, refusal
from wire.desktop_tool_args import CLIPBOARD_MAX, CLIPBOARD_PNG_MAX, PNG_SIGNATURE
from wire.errors import ErrorCode, InvalidArgs, OpError

XCLIP: Final = "xclip"
SELECTION: Final = "CLIPBOARD"
SERVER_CHILD: Final = "clipboard"
READ_CHILD: Final = "clipboard-read"
# An owner that does not answer a read in this long is hung.
READ_TIMEOUT_S: Final = 5.0
# xclip reads its input and forks its server: its first process exits at once.
SET_TIMEOUT_S: Final = 5.0
# How long the new owner is waited for after xclip's first process has exited.
OWNER_WAIT_S: Final = 1.0
OWNER_POLL_S: Final = 0.01
# What xclip says when the selection is empty (no owner, or no text in it).
EMPTY_MARKS: Final = (b"not available", b"no owner")
TARGETS: Final = ("UTF8_STRING", "STRING")
PNG: Final = "image/png"


def _xclip() -> str:
    found = shutil.which(XCLIP)
    if found is None:
        raise OpError(
            ErrorCode.UNAVAILABLE,
            "the relay's host has no xclip, which the clipboard tools need (Debian: apt "
            "install xclip)",
        )
    return found


def check_denied(display_name: str, denied: DeniedApps, reading: bool) -> None:
    """``policy_denied`` while a denied app's window has the keyboard focus (what is set
    would be pasted there, what is read was likely copied there) or, for a read, while a
    denied app owns the selection."""
    if not denied:
        return
    with contextlib.closing(DeniedWindows.open(display_name, denied)) as windows:
        if windows.focus_denied():
            raise refusal("the window with the keyboard focus")
        if reading and windows.owner_denied(SELECTION):
            raise refusal("the clipboard's text")


async def read_text(session: DesktopSession, denied: DeniedApps) -> tuple[str, bool]:
    """The selection as text ("" when empty) and whether it was cut at the cap."""
    await asyncio.to_thread(check_denied, session.display, denied, True)
    xclip = _xclip()
    for target in TARGETS:
        done = await run_in_desktop(
            session,
            READ_CHILD,
            [xclip, "-selection", "clipboard", "-o", "-t", target],
            timeout_s=READ_TIMEOUT_S,
            cap=CLIPBOARD_MAX,
        )
        if done.timed_out:
            raise OpError(
                ErrorCode.TIMEOUT,
                f"the clipboard's owner did not answer within {READ_TIMEOUT_S:g} s",
            )
        if done.returncode == 0:
            return _decode(bytes(done.stdout.data), target), done.stdout.cut
        if not _empty(done):
            raise _failed("reading", done)
    return "", False


async def read_png(session: DesktopSession, denied: DeniedApps) -> bytes | None:
    """The selection's ``image/png`` (None when it holds no image); ``file_too_large`` over
    :data:`CLIPBOARD_PNG_MAX` bytes."""
    await asyncio.to_thread(check_denied, session.display, denied, True)
    done = await run_in_desktop(
        session,
        READ_CHILD,
        [_xclip(), "-selection", "clipboard", "-o", "-t", PNG],
        timeout_s=READ_TIMEOUT_S,
        cap=CLIPBOARD_PNG_MAX,
    )
    if done.timed_out:
        raise OpError(
            ErrorCode.TIMEOUT, f"the clipboard's owner did not answer within {READ_TIMEOUT_S:g} s"
        )
    if done.returncode != 0:
        if _empty(done):
            return None
        raise _failed("reading", done)
    if done.stdout.cut:
        raise OpError(
            ErrorCode.FILE_TOO_LARGE,
            f"the clipboard's image is larger than {CLIPBOARD_PNG_MAX} bytes",
        )
    data = bytes(done.stdout.data)
    return data if data.startswith(PNG_SIGNATURE) else None


async def set_text(session: DesktopSession, text: str, denied: DeniedApps) -> None:
    """Own the selection with ``text``; answers once the new owner holds it."""
    await _own(session, [], text.encode("utf-8", "surrogatepass"), denied)


async def set_png(session: DesktopSession, png: bytes, denied: DeniedApps) -> None:
    """Own the selection with the PNG image ``png`` (offered as ``image/png``)."""
    if not png.startswith(PNG_SIGNATURE):
        raise InvalidArgs("png_b64", "not a PNG image")
    await _own(session, ["-t", PNG], png, denied)


async def _own(session: DesktopSession, target: list[str], data: bytes, denied: DeniedApps) -> None:
    """Own the selection with ``data`` (of the xclip ``target``); answers once the new owner
    holds it."""
    await asyncio.to_thread(check_denied, session.display, denied, False)
    xclip = _xclip()
    before = await asyncio.to_thread(selection_owner, session.display)
    session.forget_gone(SERVER_CHILD)
    earlier = [c for c in session.processes.children if c.name == SERVER_CHILD]
    returncode, errors = await start_server_in_desktop(
        session,
        SERVER_CHILD,
        [xclip, "-selection", "clipboard", *target, "-i"],
        stdin=data,
        timeout_s=SET_TIMEOUT_S,
    )
    if returncode != 0:
        why = errors.strip() or f"exit status {returncode}"
        raise OpError(ErrorCode.ACTION_FAILED, f"setting the clipboard failed: {why[:500]}")
    if await asyncio.to_thread(_await_new_owner, session.display, before):
        # Earlier servers lost the selection and are ending: not left to pile up.
        for child in earlier:
            child.kill()
            session.drop(child)


def selection_owner(display_name: str) -> int | None:
    """The window owning CLIPBOARD (None: no owner, or the display cannot be read)."""
    display = _open(display_name)
    if display is None:
        return None
    try:
        return _owner(display)
    finally:
        display.close()


def _open(display_name: str) -> Display | None:
    if not is_display_name(display_name):
        return None
    try:
        return Display(display_name)
    except (xerror.DisplayError, OSError):
        return None


def _owner(display: Display) -> int | None:
    owner = display.get_selection_owner(display.intern_atom(SELECTION))
    return int(owner.id) if owner else None


def _await_new_owner(display_name: str, before: int | None) -> bool:
    """Wait (bounded) until the selection's owner is no longer ``before``: xclip takes the
    selection in its forked server, which may lag its first process's exit. False: it did
    not show in time."""
    display = _open(display_name)
    if display is None:
        return False
    try:
        deadline = time.monotonic() + OWNER_WAIT_S
        while (owner := _owner(display)) is None or owner == before:
            if time.monotonic() >= deadline:
                return False
            time.sleep(OWNER_POLL_S)
        return True
    finally:
        display.close()


def _decode(data: bytes, target: str) -> str:
    if target == "UTF8_STRING":
        return data.decode("utf-8", "replace")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("latin-1")


def _empty(done: Completed) -> bool:
    errors = bytes(done.stderr.data).lower()
    return any(mark in errors for mark in EMPTY_MARKS)


def _failed(what: str, done: Completed) -> OpError:
    why = done.stderr.text().strip() or f"exit status {done.returncode}"
    return OpError(ErrorCode.ACTION_FAILED, f"{what} the clipboard failed: {why[:500]}")
