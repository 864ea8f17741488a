"""The holder of a browser's DevTools pipe: a small process of the relay's user that keeps the
relay's ends of the browser's two pipes and serves them on a Unix socket in the relay's private
state directory, one connection at a time.

Chromium quits when its DevTools pipe closes, so the pipe must not end with the relay's
process: the holder outlives a relay restart, and the restarted relay connects again. It exits
when the browser does (its end of the pipe closes). ``CODE`` runs under ``python3 -I`` with the
standard library only: ``argv``: the socket's path, the descriptor to read the browser's
messages from, the descriptor to write commands to.
"""

from __future__ import annotations

from typing import Final

CODE: Final = r"""
import os, selectors, socket, sys
path, answers, commands = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
os.umask(0o077)
try:
    os.unlink(path)
except FileNotFoundError:
    pass
server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
server.bind(path)
server.listen(1)
sel = selectors.DefaultSelector()
sel.register(server, selectors.EVENT_READ)
sel.register(answers, selectors.EVENT_READ)
peer = None
def drop():
    global peer
    if peer is not None:
        sel.unregister(peer)
        peer.close()
        peer = None
try:
    while True:
        for key, _ in sel.select():
            if key.fileobj is server:
                drop()
                peer, _ = server.accept()
                sel.register(peer, selectors.EVENT_READ)
            elif key.fileobj == answers:
                data = os.read(answers, 1 << 16)
                if not data:
                    sys.exit(0)
                if peer is not None:
                    try:
                        peer.sendall(data)
                    except OSError:
                        drop()
            elif peer is not None:
                try:
                    data = peer.recv(1 << 16)
                except OSError:
                    data = b""
                if not data:
                    drop()
                    continue
                view = memoryview(data)
                while view:
                    view = view[os.write(commands, view):]
finally:
    try:
        os.unlink(path)
    except OSError:
        pass
"""
