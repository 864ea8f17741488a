"""What another local user of a relay host can try against a desktop (run as that user).

Standard library only, so any user can run it with any Python 3 (``python3 intruder.py …``).
Prints one JSON object: what each probe reached.

  rfb-tcp PORT         RFB handshake with x11vnc, choosing security type None
  rfb-ws PORT          the same through websockify's WebSocket
  read PATH [PATH…]    list a directory / read a file
"""

from __future__ import annotations

import base64
import json
import os
import socket
import struct
import sys
from collections.abc import Callable

TIMEOUT_S = 10.0


def _exactly(recv: Callable[[int], bytes], size: int) -> bytes:
    data = b""
    while len(data) < size:
        more = recv(size - len(data))
        if not more:
            raise ConnectionError("closed")
        data += more
    return data


def rfb_none(recv: Callable[[int], bytes], send: Callable[[bytes], None]) -> dict[str, object]:
    """Try to get in without a secret: RFB 3.8, security type None."""
    out: dict[str, object] = {"banner": _exactly(recv, 12).decode("latin-1")}
    send(b"RFB 003.008\n")
    count = _exactly(recv, 1)[0]
    types = list(_exactly(recv, count)) if count else []
    out["types"] = types
    send(b"\x01")  # None, offered or not
    try:
        (result,) = struct.unpack(">I", _exactly(recv, 4))
        out["security_result"] = result
        if result == 0:
            send(b"\x01")  # ClientInit
            out["server_init"] = len(_exactly(recv, 24)) == 24
    except (ConnectionError, OSError) as err:
        out["security_result"] = f"closed ({type(err).__name__})"
    return out


def rfb_tcp(port: int) -> dict[str, object]:
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S) as sock:
        return rfb_none(sock.recv, sock.sendall)


class _WebSocket:
    """Just enough of a WebSocket client for binary messages."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(
            f"GET /websockify HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
            "Sec-WebSocket-Protocol: binary\r\n\r\n".encode()
        )
        head = b""
        while b"\r\n\r\n" not in head:
            head += _exactly(self.sock.recv, 1)
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise ConnectionError(f"no upgrade: {head[:40]!r}")
        self.pending = b""

    def recv(self, size: int) -> bytes:
        while not self.pending:
            self.pending = self._frame()
        data, self.pending = self.pending[:size], self.pending[size:]
        return data

    def _frame(self) -> bytes:
        first, second = _exactly(self.sock.recv, 2)
        if first & 0x0F == 8:
            raise ConnectionError("websocket closed")
        length = second & 0x7F
        if length == 126:
            (length,) = struct.unpack(">H", _exactly(self.sock.recv, 2))
        elif length == 127:
            (length,) = struct.unpack(">Q", _exactly(self.sock.recv, 8))
        return _exactly(self.sock.recv, length)

    def send(self, data: bytes) -> None:
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
        self.sock.sendall(bytes([0x82, 0x80 | len(data)]) + mask + masked)


def rfb_ws(port: int) -> dict[str, object]:
    ws = _WebSocket(port)
    try:
        return rfb_none(ws.recv, ws.send)
    finally:
        ws.sock.close()


def read(paths: list[str]) -> dict[str, object]:
    results: dict[str, object] = {}
    for path in paths:
        try:
            if os.path.isdir(path):
                os.listdir(path)
            else:
                with open(path, "rb") as handle:
                    handle.read(1)
            results[path] = "read"
        except PermissionError:
            results[path] = "denied"
        except OSError as err:
            results[path] = type(err).__name__
    return results


def main(argv: list[str]) -> int:
    probe, args = argv[0], argv[1:]
    try:
        if probe == "read":
            result: dict[str, object] = read(args)
        else:
            result = (rfb_tcp if probe == "rfb-tcp" else rfb_ws)(int(args[0]))
    except (ConnectionError, OSError) as err:
        result = {"error": f"{type(err).__name__}: {err}"}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
