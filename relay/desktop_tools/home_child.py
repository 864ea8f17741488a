"""The home files' child: one request on a desktop's home, run as the desktop's user.

The relay never imports this module to run it: its source is the ``-c`` argument of a
``python3`` started as the desktop's user (``home_worker.py``, ``home_stream.py``), so it uses
the standard library only. A request is a JSON line on standard input (``op``, ``path``, the
op's fields, and the relay's ``home``, ``file_max``, ``read_max``, ``list_max``); its answer
a JSON line on standard output: ``{"ok": true, "result": {...}}`` or ``{"ok": false, "code",
"message"}``. Started with the argument ``serve``, it is the desktop's file worker and answers
one request after another; otherwise it answers one. The streams (``download``, ``upload``,
one child each) write a header line, then the file's bytes (download) or read them after the
request line (upload, which ends with a result line).

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
import fcntl
import io
import json
import os
import stat
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any, cast

Request = dict[str, Any]
Answer = dict[str, Any]

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
NEW_FILE_MODE = 0o644
NEW_DIR_MODE = 0o755
STREAM_CHUNK = 1024 * 1024
TEMP_PREFIX = ".relaydesk-"
# How long a resume waits for the upload it continues to let go of the partial (a cut
# upload's child is still writing what reached it until its input ends).
PART_LOCK_WAIT_S = 10.0
PART_LOCK_POLL_S = 0.02


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
            entries.append(
                {
                    "name": entry.name,
                    "type": _kind(info.st_mode),
                    "size": info.st_size,
                    "mtime": info.st_mtime,
                }
            )
    entries.sort(key=lambda e: e["name"])
    return _ok({"path": _rel(request), "entries": entries, "truncated": truncated})


def _open_regular(home: int, parent: list[str], name: str) -> tuple[int, os.stat_result]:
    """The regular file ``name`` in ``parent``, opened for reading, and its status."""
    with folder(home, parent) as where:
        _regular(os.stat(name, dir_fd=where, follow_symlinks=False).st_mode)
        fd = os.open(name, os.O_RDONLY | FILE_FLAGS, dir_fd=where)
    try:
        info = os.fstat(fd)
        _regular(info.st_mode)
    except BaseException:
        os.close(fd)
        raise
    return fd, info


def read(home: int, request: Request) -> Answer:
    parent, name = _split(request)
    offset = int(request.get("offset", 0))
    length = int(request.get("length") or request["read_max"])
    fd, info = _open_regular(home, parent, name)
    try:
        data = bytearray()
        while len(data) < length:
            chunk = os.pread(fd, length - len(data), offset + len(data))
            if not chunk:
                break
            data += chunk
    finally:
        os.close(fd)
    result: dict[str, Any] = {
        "path": _rel(request),
        "offset": offset,
        "size": info.st_size,
        "eof": offset + len(data) >= info.st_size,
    }
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
        fd = os.open(
            temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | FILE_FLAGS, NEW_FILE_MODE, dir_fd=where
        )
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


# -- streams: download and upload (the bytes on standard output / input) ----------------------


def _part(name: str) -> str:
    """The partial upload of ``name``, beside it (hidden; a resume continues it)."""
    return f".{name}.relaydesk-part"[-255:]


def _emit(line: Answer) -> None:
    """One JSON line on standard output, before or after the raw bytes."""
    _write_all(1, (json.dumps(line) + "\n").encode())


def _open_part(where: int, name: str, flags: int, shared: bool) -> int:
    """The partial upload of ``name`` opened with ``flags`` and locked: an upload holds it
    exclusively while it writes, so a resume (and the question of where to resume) waits
    until a cut upload's child has written what reached it and let go; ``busy`` after
    ``PART_LOCK_WAIT_S``. If the partial became the file while waiting, the name is opened
    again (that file is never written)."""
    deadline = time.monotonic() + PART_LOCK_WAIT_S
    how = (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB
    part = _part(name)
    while True:
        fd = os.open(part, flags | FILE_FLAGS, NEW_FILE_MODE, dir_fd=where)
        try:
            _regular(os.fstat(fd).st_mode)
            while True:
                try:
                    fcntl.flock(fd, how)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        raise refused(
                            errno.EBUSY, "another upload of this file is in progress"
                        ) from None
                    time.sleep(PART_LOCK_POLL_S)
            held = os.fstat(fd)
            with suppress(FileNotFoundError):
                named = os.stat(part, dir_fd=where, follow_symlinks=False)
                if (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino):
                    return fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
        if not flags & os.O_CREAT:
            raise FileNotFoundError(errno.ENOENT, "the partial upload became the file")


def partial(home: int, request: Request) -> Answer:
    """How many bytes the partial upload of ``path`` holds (0: none), once no upload is
    writing it."""
    parent, name = _split(request)
    try:
        with folder(home, parent) as where:
            fd = _open_part(where, name, os.O_RDONLY, shared=True)
    except FileNotFoundError:
        return _ok({"path": _rel(request), "offset": 0})
    try:
        return _ok({"path": _rel(request), "offset": os.fstat(fd).st_size})
    finally:
        os.close(fd)


def download(home: int, request: Request) -> None:
    """A header line (path, size, offset), then the file's bytes from ``offset``."""
    parent, name = _split(request)
    offset = int(request.get("offset", 0))
    fd, info = _open_regular(home, parent, name)
    try:
        if offset > info.st_size:
            raise refused(errno.ERANGE, f"offset: past the end of the file ({info.st_size} bytes)")
        _emit(_ok({"path": _rel(request), "size": info.st_size, "offset": offset}))
        while offset < info.st_size:
            sent = os.sendfile(1, fd, offset, min(info.st_size - offset, STREAM_CHUNK))
            if not sent:
                break
            offset += sent
    finally:
        os.close(fd)


def _free_name(where: int, name: str, exists: str) -> str:
    """Where an upload lands: ``name``, or (``rename``) the first free ``name (n)``."""
    try:
        _regular(os.stat(name, dir_fd=where, follow_symlinks=False).st_mode)
    except FileNotFoundError:
        return name
    if exists == "replace":
        return name
    if exists == "refuse":
        raise refused(errno.EINVAL, "exists: a file of that name exists")
    stem, dot, suffix = name.rpartition(".")
    if not stem:
        stem, dot, suffix = name, "", ""
    for number in range(1, 10_000):
        candidate = f"{stem} ({number}){dot}{suffix}"
        try:
            os.stat(candidate, dir_fd=where, follow_symlinks=False)
        except FileNotFoundError:
            return candidate
    raise refused(errno.EINVAL, "exists: no free name left for a renamed copy")


def upload(home: int, request: Request) -> None:
    """Bytes ``offset`` to ``length`` from standard input into the partial upload; at
    ``length`` it becomes the file. A header line once the partial is open, a result line at
    the end (a cut stream leaves the partial for a resume)."""
    parent, name = _split(request)
    offset, length = int(request.get("offset", 0)), int(request["length"])
    if length > int(request["file_max"]):
        raise refused(errno.EFBIG, f"larger than {request['file_max']} bytes")
    if offset > length:
        raise refused(errno.EINVAL, "offset: past length")
    with folder(home, parent, create=True) as where:
        with suppress(FileNotFoundError):
            _regular(os.stat(name, dir_fd=where, follow_symlinks=False).st_mode)
        part = _part(name)
        fd = _open_part(where, name, os.O_WRONLY | os.O_CREAT, shared=False)
        try:
            info = os.fstat(fd)
            if offset == 0:
                os.ftruncate(fd, 0)
            elif info.st_size != offset:
                raise refused(
                    errno.ERANGE,
                    f"offset: the partial upload holds {info.st_size} bytes: resume from there",
                )
            os.lseek(fd, offset, os.SEEK_SET)
            _emit(_ok({"path": _rel(request), "offset": offset}))
            received = offset
            source = cast(io.BufferedReader, sys.stdin.buffer)  # the request line already read
            while received < length:
                chunk = source.read1(min(length - received, STREAM_CHUNK))
                if not chunk:
                    break
                _write_all(fd, chunk)
                received += len(chunk)
            if received < length:
                _emit(
                    {
                        "ok": False,
                        "code": "cancelled",
                        "message": f"cut at {received} bytes: resume from there",
                    }
                )
                return
            os.fsync(fd)
            # Still locked: a resume waiting on the partial finds the name gone, not a file.
            final = _free_name(where, name, str(request.get("exists", "rename")))
            os.rename(part, final, src_dir_fd=where, dst_dir_fd=where)
        finally:
            os.close(fd)
    landed = "/".join([*parent, final])
    _emit(_ok({"path": landed, "size": length}))


STREAMS: dict[str, Callable[[int, Request], None]] = {"download": download, "upload": upload}


OPS: dict[str, Callable[[int, Request], Answer]] = {
    "list": list_folder,
    "read": read,
    "write": write,
    "delete": delete,
    "partial": partial,
}
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
    errno.ERANGE: ("offset_mismatch", None),
    errno.EBUSY: ("busy", None),
}


def _ok(result: dict[str, Any]) -> Answer:
    return {"ok": True, "result": result}


def _error(err: OSError) -> Answer:
    code, message = ERRNO_CODES.get(err.errno or 0, ("action_failed", None))
    return {"ok": False, "code": code, "message": message or err.strerror or code}


def answer(request: Request) -> Answer | None:
    """The answer to one request (never raises for what the request or the files did); None
    when a stream wrote its own lines."""
    try:
        home = os.open(str(request["home"]), DIR_FLAGS)
    except OSError as err:
        return {
            "ok": False,
            "code": "unavailable",
            "message": f"cannot open the desktop's home: {err.strerror}",
        }
    try:
        stream = STREAMS.get(str(request["op"]))
        if stream is None:
            return OPS[str(request["op"])](home, request)
        stream(home, request)
        return None
    except OSError as err:
        return _error(err)
    finally:
        os.close(home)


def serve() -> None:
    """The desktop's file worker: one request line after another, one answer line each,
    until standard input ends (the relay went away, or stopped it). Streams are not served
    here: each has a child of its own."""
    for line in sys.stdin.buffer:
        request = json.loads(line)
        if str(request.get("op")) in STREAMS:
            _emit({"ok": False, "code": "invalid_args", "message": "op: a stream, not served here"})
            continue
        _emit(answer(request) or {"ok": False, "code": "action_failed", "message": "no answer"})


def main() -> None:
    """The request is the first line of standard input (an upload's bytes follow it); with
    the argument ``serve`` it is the desktop's file worker (:func:`serve`)."""
    if sys.argv[1:] == ["serve"]:
        serve()
        return
    request = json.loads(sys.stdin.buffer.readline())
    if (line := answer(request)) is not None:
        _emit(line)


if __name__ == "__main__":
    main()
