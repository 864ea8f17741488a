"""Cua's file commands, on the home files' actions (docs/files.md): confined to the desktop's
home, run as its user, on every relay — they need no ``RELAYDESK_CUA_SHELL``. Paths are the
actions' (relative to the home, ``~/…``, or absolute inside it); what leaves the home is
refused with ``path_outside_home``.

``create_dir`` alone is not here: the home files create no empty folders (a write creates the
folders it needs), so it stays a shell-side command (``server.cua.window_commands``).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any, Final

from server.cua.call import CuaCall, int_param, str_param
from server.doors.call import Result
from wire.errors import ErrorCode, InvalidArgs, OpError
from wire.home_files import READ_MAX

# The most ``read_text`` and a ``read_bytes`` without ``length`` gather (in parts of READ_MAX).
WHOLE_READ_MAX: Final = 16 * 1024 * 1024
HOME: Final = "~"


async def _read(call: CuaCall, path: str, offset: int = 0, length: int | None = None) -> bytes:
    data = bytearray()
    while length is None or len(data) < length:
        want = READ_MAX if length is None else min(READ_MAX, length - len(data))
        answer = await call.action(
            "desktop_file_read",
            path=path,
            offset=offset + len(data),
            length=want,
            encoding="base64",
        )
        chunk = base64.b64decode(answer["content_b64"])
        data += chunk
        if answer["eof"] or not chunk:
            break
        if len(data) > WHOLE_READ_MAX:
            raise OpError(
                ErrorCode.LIMIT_REACHED,
                f"more than {WHOLE_READ_MAX} bytes: read it in parts with read_bytes "
                "(offset, length), or download it (docs/files.md)",
            )
    return bytes(data)


async def read_text(call: CuaCall, params: Mapping[str, Any]) -> Result:
    data = await _read(call, str_param(params, "path"))
    try:
        return {"content": data.decode("utf-8")}
    except UnicodeDecodeError:
        why = "the file is not UTF-8 text: use read_bytes"
        raise OpError(ErrorCode.ACTION_FAILED, why) from None


async def read_bytes(call: CuaCall, params: Mapping[str, Any]) -> Result:
    offset = int_param(params, "offset") if params.get("offset") is not None else 0
    length = int_param(params, "length") if params.get("length") is not None else None
    if offset < 0:
        raise InvalidArgs("offset", "must be ≥ 0")
    if length is not None and length < 1:
        raise InvalidArgs("length", "must be ≥ 1")
    data = await _read(call, str_param(params, "path"), offset, length)
    return {"content_b64": base64.b64encode(data).decode("ascii")}


async def write_text(call: CuaCall, params: Mapping[str, Any]) -> Result:
    await call.action(
        "desktop_file_write",
        path=str_param(params, "path"),
        content=str_param(params, "content"),
        append=bool(params.get("append", False)),
    )
    return {}


async def write_bytes(call: CuaCall, params: Mapping[str, Any]) -> Result:
    content = str_param(params, "content_b64")
    try:
        base64.b64decode(content, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidArgs("content_b64", "must be base64") from None
    await call.action(
        "desktop_file_write",
        path=str_param(params, "path"),
        content=content,
        encoding="base64",
        append=bool(params.get("append", False)),
    )
    return {}


async def get_file_size(call: CuaCall, params: Mapping[str, Any]) -> Result:
    answer = await call.action(
        "desktop_file_read", path=str_param(params, "path"), length=1, encoding="base64"
    )
    return {"size": answer["size"]}


def _parent(path: str) -> tuple[str, str] | None:
    """The folder holding ``path`` and its name in it; None for the home itself."""
    path = path.rstrip("/") or "/"
    if path in (HOME, "", "."):
        return None
    folder, slash, name = path.rpartition("/")
    if not slash:
        return HOME, path
    return folder or "/", name


async def _kind(call: CuaCall, path: str) -> str | None:
    """What ``path`` is (file, dir, link, other), or None when nothing is there."""
    where = _parent(path)
    if where is None:
        return "dir"
    try:
        listed = await call.action("desktop_files_list", path=where[0])
    except OpError as err:
        if err.code is ErrorCode.NOT_FOUND:
            return None
        raise
    kinds = {entry["name"]: entry["type"] for entry in listed["entries"]}
    return kinds.get(where[1])


async def file_exists(call: CuaCall, params: Mapping[str, Any]) -> Result:
    return {"exists": await _kind(call, str_param(params, "path")) == "file"}


async def directory_exists(call: CuaCall, params: Mapping[str, Any]) -> Result:
    return {"exists": await _kind(call, str_param(params, "path")) == "dir"}


async def list_dir(call: CuaCall, params: Mapping[str, Any]) -> Result:
    listed = await call.action("desktop_files_list", path=str_param(params, "path"))
    return {"files": [entry["name"] for entry in listed["entries"]]}


async def delete(call: CuaCall, params: Mapping[str, Any]) -> Result:
    """``delete_file`` and ``delete_dir`` (an empty folder)."""
    await call.action("desktop_file_delete", path=str_param(params, "path"))
    return {}
