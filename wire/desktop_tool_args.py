"""The desktop tools' own argument rules (windows, clipboard, shell, files), checked at both ends.

The ops' argument and result types are in ``wire.ops``; here are the values each tool takes
and the checks past the types (which fields an op needs, ranges, lengths): the server runs them
before a request leaves (a 4xx naming the field) and the relay again before it acts
(docs/desktop-tools.md).
"""

from collections.abc import Mapping
from typing import Any, Final, Literal, cast, get_args

from wire.errors import InvalidArgs

WindowOp = Literal["activate", "close", "maximize", "minimize", "move", "resize"]
WINDOW_OPS: Final[tuple[WindowOp, ...]] = get_args(WindowOp)
# The arguments each window op needs besides ``window_id`` (both ends check them).
WINDOW_OP_FIELDS: Final[dict[WindowOp, tuple[str, ...]]] = {
    "activate": (),
    "close": (),
    "maximize": (),
    "minimize": (),
    "move": ("x", "y"),
    "resize": ("width", "height"),
}
# X coordinates and sizes are 16-bit on the wire of the X protocol.
WINDOW_COORD_MIN: Final = -32768
WINDOW_COORD_MAX: Final = 32767
WINDOW_SIZE_MAX: Final = 32767
WINDOW_ID_MAX: Final = 2**32 - 1


ClipboardOp = Literal["get", "set", "get_png", "set_png"]
# The longest clipboard text set or read (characters set, UTF-8 bytes read).
CLIPBOARD_MAX: Final = 1_000_000
# The largest PNG image set or read on the clipboard (bytes), and its base64 in an op (a
# wire text frame holds at most 16 MiB).
CLIPBOARD_PNG_MAX: Final = 8 * 1024 * 1024
CLIPBOARD_PNG_B64_MAX: Final = 4 * ((CLIPBOARD_PNG_MAX + 2) // 3)
PNG_SIGNATURE: Final = b"\x89PNG\r\n\x1a\n"
# Each op's field (none: get, get_png).
CLIPBOARD_FIELDS: Final[dict[str, tuple[str, int]]] = {
    "set": ("text", CLIPBOARD_MAX),
    "set_png": ("png_b64", CLIPBOARD_PNG_B64_MAX),
}


SHELL_TIMEOUT_MIN_S: Final = 1.0
SHELL_TIMEOUT_MAX_S: Final = 300.0
SHELL_COMMAND_MAX: Final = 30_000


FileOp = Literal[
    "read_text",
    "write_text",
    "read_bytes",
    "write_bytes",
    "exists",
    "dir_exists",
    "list_dir",
    "mkdir",
    "delete_file",
    "delete_dir",
    "size",
]
FILE_OPS: Final[tuple[FileOp, ...]] = get_args(FileOp)
# The arguments each file op needs besides ``path``, and those it may take.
FILE_OP_FIELDS: Final[dict[FileOp, tuple[str, ...]]] = {
    "write_text": ("content",),
    "write_bytes": ("content",),
}
FILE_OP_OPTIONAL: Final[dict[FileOp, tuple[str, ...]]] = {
    "write_text": ("append",),
    "write_bytes": ("append",),
    "read_bytes": ("offset", "length"),
}
FILE_PATH_MAX: Final = 4096
# The most a write carries (characters of text or of base64) and a read answers (bytes).
FILE_CONTENT_MAX: Final = 1_000_000
FILE_READ_MAX: Final = 2 * 1024 * 1024


def _in_range(name: str, value: float, low: float, high: float) -> None:
    if not low <= value <= high:
        raise InvalidArgs(name, f"must be from {low:g} to {high:g}")


def _only_fields(
    args: Mapping[str, Any],
    op: str,
    allowed: tuple[str, ...],
    needed: tuple[str, ...],
    fields: tuple[str, ...],
) -> None:
    for name in fields:
        if name in args and name not in allowed:
            raise InvalidArgs(name, f"not an argument of op {op!r}")
    for name in needed:
        if name not in args:
            raise InvalidArgs(name, f"required for op {op!r}")


WINDOW_BOUNDS: Final[dict[str, tuple[int, int]]] = {
    "x": (WINDOW_COORD_MIN, WINDOW_COORD_MAX),
    "y": (WINDOW_COORD_MIN, WINDOW_COORD_MAX),
    "width": (1, WINDOW_SIZE_MAX),
    "height": (1, WINDOW_SIZE_MAX),
}


def check_window_args(args: Mapping[str, Any]) -> None:
    """A window op's own fields (both ends): those it needs, no others, each in range;
    ``invalid_args`` naming the first that is not."""
    op = cast(WindowOp, args["op"])
    needed = WINDOW_OP_FIELDS.get(op, ())
    _only_fields(args, op, needed, needed, tuple(WINDOW_BOUNDS))
    _in_range("window_id", int(args["window_id"]), 1, WINDOW_ID_MAX)
    for name in needed:
        _in_range(name, int(args[name]), *WINDOW_BOUNDS[name])


def _check_text(name: str, value: object, longest: int, *, empty: bool = True) -> None:
    if not isinstance(value, str):
        raise InvalidArgs(name, "must be a string")
    if not empty and not value:
        raise InvalidArgs(name, "must not be empty")
    if len(value) > longest:
        raise InvalidArgs(name, f"longer than {longest} characters")


def check_clipboard_args(args: Mapping[str, Any]) -> None:
    """``text`` with ``set`` (at most :data:`CLIPBOARD_MAX` characters), ``png_b64`` with
    ``set_png`` (a PNG image of at most :data:`CLIPBOARD_PNG_MAX` bytes, in base64), none
    with ``get`` and ``get_png``."""
    op = str(args["op"])
    field = CLIPBOARD_FIELDS.get(op)
    needed = (field[0],) if field else ()
    _only_fields(args, op, needed, needed, ("text", "png_b64"))
    if field:
        _check_text(field[0], args[field[0]], field[1])


def check_shell_args(args: Mapping[str, Any]) -> None:
    """A command for ``/bin/sh -c`` (no NUL) and its time limit."""
    command = args["command"]
    _check_text("command", command, SHELL_COMMAND_MAX, empty=False)
    if "\x00" in command:
        raise InvalidArgs("command", "must not contain NUL")
    if "timeout_s" in args:
        _in_range("timeout_s", float(args["timeout_s"]), SHELL_TIMEOUT_MIN_S, SHELL_TIMEOUT_MAX_S)


FILE_FIELDS: Final = ("content", "append", "offset", "length")


def check_file_args(args: Mapping[str, Any]) -> None:
    """A file op's path and own fields: those it needs, no others, each in range."""
    op = cast(FileOp, args["op"])
    needed = FILE_OP_FIELDS.get(op, ())
    allowed = needed + FILE_OP_OPTIONAL.get(op, ())
    _only_fields(args, op, allowed, needed, FILE_FIELDS)
    path = args["path"]
    _check_text("path", path, FILE_PATH_MAX, empty=False)
    if "\x00" in path:
        raise InvalidArgs("path", "must not contain NUL")
    if "content" in args:
        _check_text("content", args["content"], FILE_CONTENT_MAX)
    if "offset" in args:
        _in_range("offset", int(args["offset"]), 0, 2**62)
    if "length" in args:
        _in_range("length", int(args["length"]), 1, FILE_READ_MAX)
