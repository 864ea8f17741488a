"""The file commands' child: one request, run as the desktop's user.

The relay never imports this module to run it: its source is the ``-c`` argument of a
``python3`` started as the desktop's user in the desktop's home (``files.py``), so it uses the
standard library only and needs no access to the relay's installation. One request arrives as
JSON on standard input (``op``, ``path`` and the op's fields, ``limit``: the largest read); one
answer leaves as JSON on standard output: ``{"ok": true, "result": {...}}`` or
``{"ok": false, "code": ..., "message": ...}``.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import sys
from collections.abc import Callable
from typing import Any

Request = dict[str, Any]
Answer = dict[str, Any]


def _ok(result: dict[str, Any]) -> Answer:
    return {"ok": True, "result": result}


def _refused(code: str, message: str) -> Answer:
    return {"ok": False, "code": code, "message": message}


def _path(request: Request) -> str:
    # Relative paths resolve against the working directory: the desktop's home.
    return os.path.expanduser(str(request["path"]))


def _read(request: Request, offset: int = 0, length: int | None = None) -> bytes | None:
    """The bytes asked for; None when the whole file is asked for and exceeds the limit."""
    limit = int(request["limit"])
    with open(_path(request), "rb") as file:
        if offset:
            file.seek(offset)
        data = file.read(limit + 1 if length is None else min(length, limit))
    return None if len(data) > limit else data


def _too_large(request: Request) -> Answer:
    return _refused(
        "limit_reached",
        f"the file is larger than {request['limit']} bytes: read it in parts with read_bytes "
        "(offset, length)",
    )


def read_text(request: Request) -> Answer:
    data = _read(request)
    if data is None:
        return _too_large(request)
    try:
        return _ok({"content": data.decode("utf-8")})
    except UnicodeDecodeError:
        return _refused("action_failed", "the file is not UTF-8 text: use read_bytes")


def read_bytes(request: Request) -> Answer:
    data = _read(request, int(request.get("offset", 0)), request.get("length"))
    if data is None:
        return _too_large(request)
    return _ok({"content_b64": base64.b64encode(data).decode("ascii")})


def _write(request: Request, data: bytes) -> Answer:
    mode = "ab" if request.get("append") else "wb"
    with open(_path(request), mode) as file:
        file.write(data)
    return _ok({"done": True})


def write_text(request: Request) -> Answer:
    return _write(request, str(request["content"]).encode("utf-8", "surrogatepass"))


def write_bytes(request: Request) -> Answer:
    try:
        data = base64.b64decode(str(request["content"]), validate=True)
    except (binascii.Error, ValueError):
        return _refused("invalid_args", "content: must be base64")
    return _write(request, data)


def exists(request: Request) -> Answer:
    return _ok({"exists": os.path.isfile(_path(request))})


def dir_exists(request: Request) -> Answer:
    return _ok({"exists": os.path.isdir(_path(request))})


def list_dir(request: Request) -> Answer:
    return _ok({"files": sorted(os.listdir(_path(request)))})


def mkdir(request: Request) -> Answer:
    os.makedirs(_path(request), exist_ok=True)
    return _ok({"done": True})


def delete_file(request: Request) -> Answer:
    os.unlink(_path(request))
    return _ok({"done": True})


def delete_dir(request: Request) -> Answer:
    os.rmdir(_path(request))
    return _ok({"done": True})


def size(request: Request) -> Answer:
    return _ok({"size": os.stat(_path(request)).st_size})


OPS: dict[str, Callable[[Request], Answer]] = {
    "read_text": read_text,
    "write_text": write_text,
    "read_bytes": read_bytes,
    "write_bytes": write_bytes,
    "exists": exists,
    "dir_exists": dir_exists,
    "list_dir": list_dir,
    "mkdir": mkdir,
    "delete_file": delete_file,
    "delete_dir": delete_dir,
    "size": size,
}
# OS errors as error codes (``wire.errors.ErrorCode`` values); others are ``action_failed``.
OS_ERRORS: tuple[tuple[type[OSError], str], ...] = (
    (FileNotFoundError, "not_found"),
    (PermissionError, "forbidden"),
)


def answer(request: Request) -> Answer:
    """The answer to one request (never raises for what the request or the file system did)."""
    try:
        return OPS[str(request["op"])](request)
    except OSError as err:
        code = next((c for kind, c in OS_ERRORS if isinstance(err, kind)), "action_failed")
        reason = err.strerror or type(err).__name__
        where = str(request.get("path", ""))[:200]
        return _refused(code, f"{request.get('op')} {where}: {reason}")


def main() -> None:
    request = json.loads(sys.stdin.buffer.read())
    sys.stdout.write(json.dumps(answer(request)))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
