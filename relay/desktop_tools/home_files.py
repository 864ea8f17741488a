"""Files in a desktop's home (``desktop.home_file``), on every relay: no shell opt-in, since
they reach only the home and only as the desktop's user (docs/files.md).

Every op runs in a small Python child (``home_child.py``, its source as the ``-c`` argument)
started as the desktop's user and joined to the desktop's processes: the desktop's long-lived
file worker (``home_worker.py``) or a stream's own child (``home_stream.py``). The relay itself
opens no file of the home, so nothing here runs with the relay's (root's) rights on the home's
contents. This module holds what both share: the settings, the child's source, the refusals.
"""

from __future__ import annotations

import functools
import math
import os
import shutil
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from relay.desktop_tools.session import DesktopSession
from wire.errors import ErrorCode, InvalidArgs, OpError, RelaydeskError
from wire.home_files import (
    FILE_MAX_ENV,
    FILE_MAX_MB_DEFAULT,
    LIST_MAX,
    READ_MAX,
)

CHILD_SOURCE: Final = Path(__file__).with_name("home_child.py")
PYTHONS: Final = ("/usr/bin/python3", "python3")
# Isolated (no user site, no environment) and without ``site`` (the child needs the standard
# library only; skipping it saves a good part of the interpreter's start).
CHILD_FLAGS: Final = ("-I", "-S")
REQUEST_FIELDS: Final = ("op", "path", "offset", "length", "content", "encoding", "append")
# A listing's JSON (names escaped up to 6 bytes a byte), or a read's (text escaped the same).
ANSWER_CAP: Final = max(6 * READ_MAX, LIST_MAX * 1600) + 4096
ERROR_CODES: Final = {code.value: code for code in ErrorCode}
MIB: Final = 1024 * 1024


class FileSettingsError(RelaydeskError):
    """``RELAYDESK_FILE_MAX_MB`` that cannot be used as given."""


@dataclass(frozen=True)
class HomeFileSettings:
    """The largest file written into a home, in bytes (``RELAYDESK_FILE_MAX_MB``)."""

    file_max: int = FILE_MAX_MB_DEFAULT * MIB

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> HomeFileSettings:
        raw = (os.environ if environ is None else environ).get(FILE_MAX_ENV, "").strip()
        if not raw:
            return cls()
        try:
            megabytes = float(raw)
        except ValueError:
            megabytes = 0.0
        if not (megabytes > 0 and math.isfinite(megabytes)):
            raise FileSettingsError(f"{FILE_MAX_ENV}={raw!r}: give a number of MB above 0")
        return cls(max(1, int(megabytes * MIB)))


@functools.cache
def child_source() -> str:
    return CHILD_SOURCE.read_text(encoding="utf-8")


def python_for(session: DesktopSession) -> str:
    """The interpreter the desktop's user runs the child with."""
    for candidate in PYTHONS:
        if (found := shutil.which(candidate)) is not None:
            return found
    if session.user is None:
        return sys.executable  # it runs as the relay, which reads its own interpreter
    raise OpError(ErrorCode.UNAVAILABLE, "the relay's host has no python3 for file operations")


def refusal(answer: dict[str, Any]) -> OpError:
    """The child's refusal as the op's error."""
    code = ERROR_CODES.get(str(answer.get("code")), ErrorCode.ACTION_FAILED)
    message = str(answer.get("message", code.value))[:500]
    if code is ErrorCode.INVALID_ARGS:
        field, _, problem = message.partition(": ")
        return InvalidArgs(field, problem)
    return OpError(code, message, {"field": "path"} if code is not ErrorCode.FILE_TOO_LARGE else {})
