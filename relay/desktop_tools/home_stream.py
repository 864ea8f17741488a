"""File channels: one download or upload of a file in a desktop's home, streamed over a relay
channel (docs/files.md).

The bytes go through a child run as the desktop's user (``home_child.py``, the same
confinement as the home file ops), joined to the desktop's processes: its standard output
(a header line, then a download's bytes or an upload's result line) feeds the channel, the
channel's bytes feed its standard input. Flow control is the channel's credit end to end: the
relay reads the child's output only while the server grants credit, and writes to its input
only as fast as it drains, so a large file never sits in the relay's memory.

The child starts *held* like every desktop tool's command (``relay/desktop_tools/run.py``): a
shell waits for one line on its standard input, written once the process has joined the
desktop, then replaces itself with the child, which reads the request line next.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import subprocess
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, BinaryIO, Final

from relay.channels import Chunk, StreamChannel
from relay.desktop_tools.home_files import (
    CHILD_FLAGS,
    HomeFileSettings,
    child_source,
    python_for,
    refusal,
)
from relay.desktop_tools.session import DesktopSession
from relay.desktops.process import ChildProcess, working_directory
from relay.wsframes import HEADROOM
from wire.errors import ErrorCode, InvalidArgs, OpError
from wire.frames import Payload
from wire.home_files import LIST_MAX, PATH_MAX, READ_MAX
from wire.ids import ChannelId
from wire.ops import ChannelOpenResult, FileTransfer

if TYPE_CHECKING:
    from relay.link import ServerLink

log = logging.getLogger(__name__)

CHILD: Final = "home-file-stream"
_HOLD: Final = 'read -r go || exit 0; exec "$@"'
# What the relay reads of the child's output at a time, and buffers at most.
READ_CHUNK: Final = 256 * 1024
HEADER_TIMEOUT_S: Final = 20.0
# After the channel ends, how long the child may take to finish (an upload's fsync).
CLOSE_GRACE_S: Final = 10.0
EXISTS: Final = ("replace", "rename", "refuse")


class ChildStream:
    """A :class:`relay.channels.ByteStream` over a child's standard output and input."""

    def __init__(
        self,
        popen: subprocess.Popen[bytes],
        session: DesktopSession,
        child: ChildProcess,
        stdout: asyncio.StreamReader,
        stdout_pipe: asyncio.BaseTransport,
        stdin: asyncio.StreamWriter,
    ) -> None:
        self.popen = popen
        self.session = session
        self.child = child
        self.stdout = stdout
        self._stdout_pipe = stdout_pipe
        self.stdin = stdin
        # The header line, read by the relay first, goes to the server ahead of the rest.
        self.pending = b""
        self._closed = False

    async def read(self) -> Chunk:
        data, self.pending = (self.pending, b"") if self.pending else (b"", b"")
        data = data or await self.stdout.read(READ_CHUNK)
        chunk = bytearray(HEADROOM + len(data))
        chunk[HEADROOM:] = data
        return chunk if data else bytearray()

    async def write(self, data: Payload) -> None:
        if self.stdin.is_closing():
            raise ConnectionResetError("the file stream ended")
        self.stdin.write(bytes(data))
        await self.stdin.drain()

    def kill(self) -> None:
        """Kill the child's whole process group now."""
        _kill_group(self.popen.pid)

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.stdin.close()  # a cut upload: the child keeps its partial and exits
        try:
            async with asyncio.timeout(CLOSE_GRACE_S):
                await asyncio.to_thread(self.popen.wait)
        except TimeoutError:
            _kill_group(self.popen.pid)
            await asyncio.to_thread(self.popen.wait)
        finally:
            self._stdout_pipe.close()  # the transports own the pipes' ends
            self.session.forget(self.child)


def check_transfer(transfer: FileTransfer) -> None:
    """``invalid_args`` naming the first field of ``target.file`` that does not fit."""
    path = transfer["path"]
    if not path or len(path) > PATH_MAX or "\x00" in path:
        raise InvalidArgs("path", f"required, at most {PATH_MAX} characters, without NUL")
    if transfer["offset"] < 0:
        raise InvalidArgs("offset", "must be ≥ 0")
    if transfer["op"] == "upload" and transfer.get("length", -1) < 0:
        raise InvalidArgs("length", "required by an upload (the whole file's size, ≥ 0)")
    if transfer.get("exists", "rename") not in EXISTS:
        raise InvalidArgs("exists", f"must be one of {', '.join(EXISTS)}")


async def open_file_channel(
    link: ServerLink,
    channel_id: ChannelId,
    session: DesktopSession,
    transfer: FileTransfer,
    settings: HomeFileSettings,
    opened: Callable[[StreamChannel], None] | None = None,
) -> ChannelOpenResult:
    """Start the transfer's child; once it has opened the file (or refused), the channel
    (told to ``opened``: the desktop is in use while it is open)."""
    check_transfer(transfer)
    request: dict[str, Any] = {
        **transfer,
        "home": str(session.home),
        "file_max": settings.file_max,
        "read_max": READ_MAX,
        "list_max": LIST_MAX,
    }
    stream = await start_child(session)
    try:
        stream.stdin.write(json.dumps(request).encode() + b"\n")
        await stream.stdin.drain()
        async with asyncio.timeout(HEADER_TIMEOUT_S):
            line = await stream.stdout.readline()
        try:
            header = json.loads(line)
        except ValueError:
            header = {"code": "action_failed", "message": "the file stream did not start"}
        if not header.get("ok"):
            raise refusal(header)
        stream.pending = line
    except BaseException:
        await stream.aclose()
        raise
    channel = StreamChannel(channel_id, link, stream)
    if opened is not None:
        opened(channel)
    link.start_channel(channel)
    result = header["result"]
    size = int(result["size"]) if "size" in result else int(transfer.get("length", 0))
    return {"channel_id": channel_id, "path": str(result["path"]), "size": size}


def _spawn(
    session: DesktopSession, extra: tuple[str, ...]
) -> tuple[subprocess.Popen[bytes], BinaryIO, BinaryIO]:
    """Start the child held (blocking; fork and exec take milliseconds, like run.py's); its
    input's and output's far ends as unbuffered files, owned by whoever wraps them next (the
    Popen object holds none, so no end is ever closed twice)."""
    user = session.user.popen_kwargs() if session.user is not None else {}
    argv = [
        "/bin/sh",
        "-c",
        _HOLD,
        "relaydesk-held",
        python_for(session),
        *CHILD_FLAGS,
        "-c",
        child_source(),
        *extra,
    ]
    into, into_far = os.pipe()
    out_far, out = os.pipe()
    try:
        popen = subprocess.Popen(
            argv,
            stdin=into,
            stdout=out,
            stderr=subprocess.DEVNULL,
            cwd=working_directory(session.env),
            env=dict(session.env),
            start_new_session=True,
            close_fds=True,
            **user,
        )
    except OSError as err:
        os.close(into_far)
        os.close(out_far)
        raise OpError(ErrorCode.UNAVAILABLE, f"cannot start a file stream: {err.strerror}") from err
    finally:
        os.close(into)
        os.close(out)
    return popen, os.fdopen(into_far, "wb", buffering=0), os.fdopen(out_far, "rb", buffering=0)


async def start_child(
    session: DesktopSession,
    name: str = CHILD,
    extra: tuple[str, ...] = (),
    line_max: int = READ_CHUNK,
) -> ChildStream:
    """The home files' child (with the arguments ``extra``) started as the desktop's user and
    joined to the desktop's processes as ``name``; its output is read in lines of at most
    ``line_max`` bytes."""
    popen, into, out = _spawn(session, extra)
    loop = asyncio.get_running_loop()
    stdout = asyncio.StreamReader(limit=line_max)
    try:
        child = await session.track(name, popen.pid)
        out_pipe, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(stdout), out
        )
        transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, into)
    except BaseException:
        _kill_group(popen.pid)
        into.close()
        out.close()
        await asyncio.to_thread(popen.wait)
        raise
    stdin = asyncio.StreamWriter(transport, protocol, None, loop)
    stdin.write(b"go\n")  # it is in the desktop's cgroup now
    return ChildStream(popen, session, child, stdout, out_pipe, stdin)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
