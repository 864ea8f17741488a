"""File commands in a desktop, run as its user: a small Python child (``file_child.py``,
its source as the ``-c`` argument) gets one request on standard input and answers on standard
output, so what it may read and write is exactly what the desktop's user may."""

from __future__ import annotations

import functools
import json
import shutil
import sys
from pathlib import Path
from typing import Any, Final, cast

from relay.desktop_tools.run import run_in_desktop
from relay.desktop_tools.session import DesktopSession
from wire.desktop_tool_args import FILE_READ_MAX
from wire.errors import ErrorCode, InvalidArgs, OpError
from wire.ops import DesktopFileArgs, DesktopFileResult

CHILD: Final = "file-command"
CHILD_SOURCE: Final = Path(__file__).with_name("file_child.py")
# Interpreters tried for the child (the relay's own may sit where the desktop's user cannot
# read, a virtual environment in a private checkout).
PYTHONS: Final = ("/usr/bin/python3", "python3")
TIMEOUT_S: Final = 20.0
# A read's answer is JSON: base64 (4/3) or text with escapes (up to 6 bytes a byte).
ANSWER_CAP: Final = 6 * FILE_READ_MAX + 4096
REQUEST_FIELDS: Final = ("op", "path", "content", "append", "offset", "length")
ERROR_CODES: Final = {code.value: code for code in ErrorCode}


@functools.cache
def _source() -> str:
    return CHILD_SOURCE.read_text(encoding="utf-8")


def _python(session: DesktopSession) -> str:
    for candidate in PYTHONS:
        if (found := shutil.which(candidate)) is not None:
            return found
    if session.user is None:
        return sys.executable  # it runs as the relay, which reads its own interpreter
    raise OpError(ErrorCode.UNAVAILABLE, "the relay's host has no python3 for file commands")


async def file_command(session: DesktopSession, args: DesktopFileArgs) -> DesktopFileResult:
    """Run one file command (its arguments already checked) and answer its result."""
    request: dict[str, Any] = {k: v for k, v in args.items() if k in REQUEST_FIELDS}
    request["limit"] = FILE_READ_MAX
    done = await run_in_desktop(
        session,
        CHILD,
        [_python(session), "-I", "-c", _source()],
        timeout_s=TIMEOUT_S,
        cap=ANSWER_CAP,
        stdin=json.dumps(request).encode(),
    )
    if done.timed_out:
        raise OpError(ErrorCode.TIMEOUT, f"the file command did not finish within {TIMEOUT_S:g} s")
    try:
        answer = json.loads(bytes(done.stdout.data))
    except ValueError:
        why = done.stderr.text().strip()[-500:] or f"exit status {done.returncode}"
        raise OpError(ErrorCode.ACTION_FAILED, f"the file command failed: {why}") from None
    if not answer.get("ok"):
        raise _refusal(answer)
    result = dict(answer.get("result") or {})
    result["desktop_session_id"] = session.desktop_session_id
    return cast(DesktopFileResult, result)


def _refusal(answer: dict[str, Any]) -> OpError:
    code = ERROR_CODES.get(str(answer.get("code")), ErrorCode.ACTION_FAILED)
    message = str(answer.get("message", code.value))[:1000]
    if code is ErrorCode.INVALID_ARGS:
        field, _, problem = message.partition(": ")
        return InvalidArgs(field, problem)
    return OpError(code, message, {"field": "path"})
