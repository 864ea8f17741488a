"""Files in a desktop's home: the ``desktop.home_file`` op, its types and its argument rules,
checked at both ends (the server before a request leaves, the relay before it acts).

Four operations, confined to the desktop's home and run as the desktop's user (docs/files.md):
``list`` a folder, ``read`` a part of a file, ``write`` a file (replacing it, or appending to
it), ``delete`` a file or an empty folder. Paths are relative to the home (``~/`` and absolute
paths inside the home are taken too); ``..`` is refused before anything is opened, and the
relay refuses every symbolic link, device and FIFO on the way with ``path_outside_home``.
"""

from collections.abc import Mapping
from typing import Any, Final, Literal, NotRequired, TypedDict, get_args

from wire.errors import InvalidArgs
from wire.ops import DesktopTargetArgs, OpSpec

# ``partial``: how much of an upload the relay holds (the file routes' resume, docs/files.md).
HomeFileOp = Literal["list", "read", "write", "delete", "partial"]
HOME_FILE_OPS: Final[tuple[HomeFileOp, ...]] = get_args(HomeFileOp)
Encoding = Literal["utf-8", "base64"]
ENCODINGS: Final[tuple[Encoding, ...]] = get_args(Encoding)
EntryType = Literal["file", "dir", "link", "other"]

PATH_MAX: Final = 4096
# The most a write carries in ``content`` (characters of text or of base64): larger files
# travel as uploads (docs/files.md).
CONTENT_MAX: Final = 1_000_000
# The most one read answers (bytes); larger files are read in parts (offset, length).
READ_MAX: Final = 1024 * 1024
# The most entries one listing answers (``truncated`` says when a folder holds more).
LIST_MAX: Final = 10_000
# RELAYDESK_FILE_MAX_MB: the largest file written into a home (relay side).
FILE_MAX_ENV: Final = "RELAYDESK_FILE_MAX_MB"
FILE_MAX_MB_DEFAULT: Final = 2048

# The fields each op may take besides ``op`` and ``path`` (and which it needs).
OP_FIELDS: Final[dict[HomeFileOp, tuple[str, ...]]] = {
    "list": (),
    "read": ("offset", "length", "encoding"),
    "write": ("content", "encoding", "append"),
    "delete": (),
    "partial": (),
}
OP_NEEDS: Final[dict[HomeFileOp, tuple[str, ...]]] = {"write": ("content",)}
FIELDS: Final = ("offset", "length", "content", "encoding", "append")


class HomeFileArgs(DesktopTargetArgs):
    op: HomeFileOp
    path: str
    offset: NotRequired[int]
    length: NotRequired[int]
    content: NotRequired[str]
    encoding: NotRequired[Encoding]
    append: NotRequired[bool]


class HomeFileEntry(TypedDict):
    """One entry of a listed folder; ``link`` entries are never followed."""

    name: str
    type: EntryType
    size: int
    mtime: float


class HomeFileResult(TypedDict):
    """``path``: the home-relative path acted on ('' for the home); then per op: ``list``
    entries, truncated; ``read`` content or content_b64, offset, size (the file's), eof;
    ``write`` size; ``delete`` deleted."""

    desktop_session_id: str
    path: str
    entries: NotRequired[list[HomeFileEntry]]
    truncated: NotRequired[bool]
    content: NotRequired[str]
    content_b64: NotRequired[str]
    offset: NotRequired[int]
    size: NotRequired[int]
    eof: NotRequired[bool]
    deleted: NotRequired[bool]


DESKTOP_HOME_FILE: Final = OpSpec("desktop.home_file", HomeFileArgs, HomeFileResult)


def check_home_file_args(args: Mapping[str, Any]) -> None:
    """``invalid_args`` naming the first field that does not fit ``args['op']``."""
    op = args.get("op")
    if op not in HOME_FILE_OPS:
        raise InvalidArgs("op", f"must be one of {', '.join(HOME_FILE_OPS)}")
    for name in FIELDS:
        if name in args and name not in OP_FIELDS[op]:
            raise InvalidArgs(name, f"not taken by {op}")
    for name in OP_NEEDS.get(op, ()):
        if name not in args:
            raise InvalidArgs(name, f"required by {op}")
    path = args.get("path")
    if not isinstance(path, str) or not path:
        raise InvalidArgs("path", "required (a non-empty string)")
    if len(path) > PATH_MAX or "\x00" in path:
        raise InvalidArgs("path", f"at most {PATH_MAX} characters, without NUL")
    if "offset" in args and (not _is_int(args["offset"]) or args["offset"] < 0):
        raise InvalidArgs("offset", "must be an integer ≥ 0")
    if "length" in args and (not _is_int(args["length"]) or not 1 <= args["length"] <= READ_MAX):
        raise InvalidArgs("length", f"must be an integer from 1 to {READ_MAX}")
    if "append" in args and not isinstance(args["append"], bool):
        raise InvalidArgs("append", "must be true or false")
    if "encoding" in args and args["encoding"] not in ENCODINGS:
        raise InvalidArgs("encoding", f"must be one of {', '.join(ENCODINGS)}")
    if "content" in args:
        content = args["content"]
        if not isinstance(content, str) or len(content) > CONTENT_MAX:
            raise InvalidArgs("content", f"must be a string of at most {CONTENT_MAX} characters")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def names_hidden(path: str) -> bool:
    """Whether ``path`` goes through a hidden file or folder (a name starting with ``.``, as
    ``~/.config`` or ``.ssh/id_ed25519``): where a desktop's apps keep keys and sessions."""
    return any(part.startswith(".") and part not in (".", "..") for part in path.split("/"))
