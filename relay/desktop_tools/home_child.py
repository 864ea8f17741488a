"""The home files' child: one request on a desktop's home, run as the desktop's user.

The relay never imports this module to run it: its source is the ``-c`` argument of a
``python3`` started as the desktop's user (``home_files.py``), so it uses the standard library
only. One request arrives as JSON on standard input (``op``, ``path``, the op's fields, and the
relay's ``home``, ``file_max``, ``read_max``, ``list_max``); one answer leaves as JSON on
standard output: ``{"ok": true, "result": {...}}`` or ``{"ok": false, "code", "message"}``.

Confinement is checked where the file is opened (docs/files.md): the path's names are opened
one by one from a descriptor of the home with ``O_NOFOLLOW`` (``openat``), so no symbolic
link is ever followed, whether it points inside the home or out of it; ``..`` is refused before
anything is opened; what is read or written must be a regular file (``fstat`` on the opened
descriptor, opened with ``O_NONBLOCK`` so a FIFO cannot hold it). Refusals are
``path_outside_home``, raised here as ``EXDEV`` like ``openat2``'s ``RESOLVE_BENEATH``.
Messages never name the path (they reach the audit trail).
"""

from __future__ import annotations

import base64
import binascii
import errno
import json
import os
import stat
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

Request = dict[str, Any]
Answer = dict[str, Any]

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
NEW_FILE_MODE = 0o644
NEW_DIR_MODE = 0o755
TEMP_PREFIX = ".relaydesk-"


def refused(number: int, message: str) -> OSError:
    """A refusal as an ``OSError`` whose number picks its code (``ERRNO_CODES``): ``EXDEV``
    for a path that leaves the home (as ``openat2``'s ``RESOLVE_BENEATH`` answers), ``EFBIG``
    for a file over the limit, ``EINVAL`` for an argument (``field: problem``)."""
    return OSError(number, message)


def _outside(why: str) -> OSError:
    return refused(errno.EXDEV, f"refused: {why}")


def names(path: str, home: str) -> list[str]:
    """The path's names below the home ('' for the home itself); refuses ``..`` and paths
    that name no place in the home."""
    home = home.rstrip("/") or "/"
    if path == "~" or path.startswith("~/"):
        rest = path[1:]
    elif path.startswith("~"):
        raise _outside("another user's home")
    elif path.startswith("/"):
        if path != home and not path.startswith(home + "/"):
            raise _outside("an absolute path outside the desktop's home")
        rest = path[len(home) :]
    else:
        rest = path
    found = [name for name in rest.split("/") if name not in ("", ".")]
    if ".." in found:
        raise _outside("'..' in the path")
    return found


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "link"
    if stat.S_ISDIR(mode):
        return "dir"
    return "file" if stat.S_ISREG(mode) else "other"


def _regular(mode: int) -> None:
    kind = _kind(mode)
    if kind == "link":
        raise _outside("a symbolic link (links are never followed)")
    if kind == "other":
        raise _outside("not a regular file (a FIFO, socket or device)")
    if kind == "dir":
        raise refused(errno.EISDIR, "a folder, not a file")


@contextmanager
def folder(home: int, path: list[str], *, create: bool = False) -> Iterator[int]:
    """A descriptor of the folder ``path`` below ``home``, opened name by name."""
    fd = os.dup(home)
    try:
        for name in path:
            try:
                below = os.open(name, DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                os.mkdir(name, NEW_DIR_MODE, dir_fd=fd)
                below = os.open(name, DIR_FLAGS, dir_fd=fd)
            except OSError as err:
                if err.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                if stat.S_ISLNK(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
                    raise _outside("a symbolic link (links are never followed)") from None
                raise refused(errno.ENOTDIR, "a part of the path is not a folder") from None
            os.close(fd)
            fd = below
        yield fd
    finally:
        os.close(fd)


def _split(request: Request) -> tuple[list[str], str]:
    found = names(str(request["path"]), str(request["home"]))
    if not found:
        raise refused(errno.EINVAL, "path: names the home itself, not a file")
    return found[:-1], found[-1]


def _rel(request: Request) -> str:
    return "/".join(names(str(request["path"]), str(request["home"])))


def list_folder(home: int, request: Request) -> Answer:
    limit = int(request["list_max"])
    entries: list[dict[str, Any]] = []
    truncated = False
    path = names(str(request["path"]), str(request["home"]))
    with folder(home, path) as fd, os.scandir(fd) as listing:
        for entry in listing:
            if len(entries) == limit:
                truncated = True
                break
            try:
                info = entry.stat(follow_symlinks=False)
            except FileNotFoundError:  # gone meanwhile
                continue
            entries.append({"name": entry.name, "type": _kind(info.st_mode),
                            "size": info.st_size, "mtime": info.st_mtime})  # fmt: skip
    entries.sort(key=lambda e: e["name"])
    return _ok({"path": _rel(request), "entries": entries, "truncated": truncated})


def read(home: int, request: Request) -> Answer:
    parent, name = _split(request)
    offset = int(request.get("offset", 0))
    length = int(request.get("length") or request["read_max"])
    with folder(home, parent) as where:
        _regular(os.stat(name, dir_fd=where, follow_symlinks=False).st_mode)
        fd = os.open(name, os.O_RDONLY | FILE_FLAGS, dir_fd=where)
    try:
        info = os.fstat(fd)
        _regular(info.st_mode)
        data = bytearray()
        while len(data) < length:
            chunk = os.pread(fd, length - len(data), offset + len(data))
            if not chunk:
                break
            data += chunk
    finally:
        os.close(fd)
    result: dict[str, Any] = {"path": _rel(request), "offset": offset, "size": info.st_size,
                              "eof": offset + len(data) >= info.st_size}  # fmt: skip
    if request.get("encoding", "utf-8") == "base64":
        result["content_b64"] = base64.b64encode(bytes(data)).decode("ascii")
    else:
        try:
            result["content"] = bytes(data).decode("utf-8")
        except UnicodeDecodeError:
            raise refused(errno.EILSEQ, "not UTF-8 text: read with encoding base64") from None
    return _ok(result)


def _content(request: Request) -> bytes:
    content = str(request["content"])
    try:
        if request.get("encoding", "utf-8") == "base64":
            return base64.b64decode(content, validate=True)
        return content.encode("utf-8")
    except (binascii.Error, ValueError):
        raise refused(errno.EINVAL, f"content: not {request.get('encoding')}") from None


def write(home: int, request: Request) -> Answer:
    parent, name = _split(request)
    data = _content(request)
    limit = int(request["file_max"])
    if len(data) > limit:
        raise refused(errno.EFBIG, f"larger than {limit} bytes")
    with folder(home, parent, create=True) as where:
        with suppress(FileNotFoundError):
            _regular(os.stat(name, dir_fd=where, follow_symlinks=False).st_mode)
        if request.get("append"):
            return _ok({"path": _rel(request), "size": _append(where, name, data, limit)})
        temp = f"{TEMP_PREFIX}{os.getpid()}-{name}"[:255]
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | FILE_FLAGS, NEW_FILE_MODE,
                     dir_fd=where)  # fmt: skip
        try:
            _write_all(fd, data)
            os.fsync(fd)
            os.close(fd)
            # Replaces the name itself (a link of that name is refused above, never followed).
            os.rename(temp, name, src_dir_fd=where, dst_dir_fd=where)
        except BaseException:
            os.unlink(temp, dir_fd=where)
            raise
    return _ok({"path": _rel(request), "size": len(data)})


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _append(where: int, name: str, data: bytes, limit: int) -> int:
    """Append ``data`` to the regular file ``name`` (created when missing); its new size."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | FILE_FLAGS
    fd = os.open(name, flags, NEW_FILE_MODE, dir_fd=where)
    try:
        info = os.fstat(fd)
        _regular(info.st_mode)
        if info.st_size + len(data) > limit:
            raise refused(errno.EFBIG, f"would grow larger than {limit} bytes")
        _write_all(fd, data)
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def delete(home: int, request: Request) -> Answer:
    parent, name = _split(request)
    with folder(home, parent) as where:
        mode = os.stat(name, dir_fd=where, follow_symlinks=False).st_mode
        if stat.S_ISDIR(mode):
            os.rmdir(name, dir_fd=where)
        else:  # a link or a FIFO is removed itself, never what it points to
            os.unlink(name, dir_fd=where)
    return _ok({"path": _rel(request), "deleted": True})


OPS: dict[str, Callable[[int, Request], Answer]] = {
    "list": list_folder, "read": read, "write": write, "delete": delete,
}  # fmt: skip
# OS errors as error codes, with their message (None: the error's own, for refusals made
# here); others are ``action_failed``.
ERRNO_CODES: dict[int, tuple[str, str | None]] = {
    errno.EXDEV: ("path_outside_home", None),
    errno.EFBIG: ("file_too_large", None),
    errno.EINVAL: ("invalid_args", None),
    errno.EILSEQ: ("action_failed", None),
    errno.ENOENT: ("not_found", "no such file or folder"),
    errno.EACCES: ("forbidden", "the desktop's user may not do that"),
    errno.EPERM: ("forbidden", "the desktop's user may not do that"),
    errno.ENOSPC: ("limit_reached", "no space left in the desktop's home"),
    errno.EDQUOT: ("limit_reached", "the desktop user's disk quota is used up"),
    errno.ENOTEMPTY: ("action_failed", "the folder is not empty"),
    errno.EISDIR: ("action_failed", "a folder, not a file"),
    errno.ENOTDIR: ("action_failed", "a part of the path is not a folder"),
    errno.ELOOP: ("path_outside_home", "refused: a symbolic link (links are never followed)"),
}


def _ok(result: dict[str, Any]) -> Answer:
    return {"ok": True, "result": result}


def answer(request: Request) -> Answer:
    """The answer to one request (never raises for what the request or the files did)."""
    try:
        home = os.open(str(request["home"]), DIR_FLAGS)
    except OSError as err:
        return {"ok": False, "code": "unavailable",
                "message": f"cannot open the desktop's home: {err.strerror}"}  # fmt: skip
    try:
        return OPS[str(request["op"])](home, request)
    except OSError as err:
        code, message = ERRNO_CODES.get(err.errno or 0, ("action_failed", None))
        return {"ok": False, "code": code, "message": message or err.strerror or code}
    finally:
        os.close(home)


def main() -> None:
    request = json.loads(sys.stdin.buffer.read())
    sys.stdout.write(json.dumps(answer(request)))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
