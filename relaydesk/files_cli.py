"""``relaydesk files put|get|ls``: files into, out of and in a desktop's home through the
server's HTTP API (docs/files.md), with an API token like ``relaydesk desktops``.

``put`` and ``get`` stream the file (a piece at a time, whatever its size) with a progress bar
on standard error; ``--resume`` continues a cut transfer from where it stopped (``put`` asks
the server how much it holds; ``get`` appends to the local file). Exit status: 0 done, 1
refused or failed (the message says why), 2 bad usage.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final

from relaydesk.desktops_cli import UsageError, run_api, saved_for

if TYPE_CHECKING:
    from relaydesk.client import RelaydeskClient

PIECE: Final = 1024 * 1024
BAR_WIDTH: Final = 30


def add_files(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "files",
        help="put, get and list files in a desktop's home (needs an API token)",
        description="Upload into, download from and list a running desktop's home through "
        "the server's API, as the desktop's user and confined to its home (docs/files.md).",
    )
    fsub = p.add_subparsers(dest="files_command", required=True, metavar="COMMAND")
    put = fsub.add_parser(
        "put",
        help="upload a local file into the desktop's home",
        description="Upload LOCAL to REMOTE (default Downloads/NAME). A "
        "file of that name gets a renamed copy unless --replace.",
    )
    put.add_argument("local", help="the local file")
    put.add_argument("remote", nargs="?", default=None, help="the path in the desktop's home")
    put.add_argument("--replace", action="store_true", help="replace a file of that name")
    put.add_argument("--resume", action="store_true", help="continue a cut upload")
    _common(put)
    put.set_defaults(func=lambda args: _run(_put, args))
    get = fsub.add_parser(
        "get",
        help="download a file from the desktop's home",
        description="Download REMOTE to LOCAL (default: its name here).",
    )
    get.add_argument("remote", help="the path in the desktop's home")
    get.add_argument("local", nargs="?", default=None, help="the local file")
    get.add_argument(
        "--resume", action="store_true", help="append to LOCAL from its size (a cut download)"
    )
    _common(get)
    get.set_defaults(func=lambda args: _run(_get, args))
    ls = fsub.add_parser(
        "ls",
        help="list a folder of the desktop's home",
        description="List REMOTE (default: the home).",
    )
    ls.add_argument("remote", nargs="?", default="~", help="a folder in the desktop's home")
    _common(ls)
    ls.set_defaults(func=lambda args: _run(_ls, args))


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--relay",
        default=None,
        help="relay name or id (may be left out when one relay runs the desktop)",
    )
    p.add_argument("--kind", default="virtual", help="the desktop's kind (default virtual)")
    p.add_argument("--slot", default="main", help="the desktop's slot (default main)")
    p.add_argument(
        "--server",
        default=None,
        help="the server's URL (RELAYDESK_SERVER_URL, else the one relaydesk up saved)",
    )
    p.add_argument(
        "--token-file", default=None, help="file holding an API token (RELAYDESK_API_TOKEN)"
    )
    p.add_argument(
        "--conversation", default=None, help="conversation id (RELAYDESK_CONVERSATION_ID)"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print one JSON object (for scripts)")


class Progress:
    """A one-line progress bar on standard error."""

    def __init__(self, total: int, done: int, shown: bool, out: IO[str] = sys.stderr) -> None:
        self.total, self.done, self.shown, self.out = total, done, shown, out
        self.started = time.monotonic()
        self.first = done
        self._last = 0.0

    def add(self, count: int) -> None:
        self.done += count
        now = time.monotonic()
        if self.shown and (now - self._last >= 0.1 or self.done >= self.total):
            self._last = now
            self.out.write("\r" + self.line(now))
            self.out.flush()

    def line(self, now: float) -> str:
        share = self.done / self.total if self.total else 1.0
        filled = int(share * BAR_WIDTH)
        rate = (self.done - self.first) / max(now - self.started, 1e-6) / PIECE
        return (
            f"[{'#' * filled}{' ' * (BAR_WIDTH - filled)}] {share:6.1%} "
            f"{self.done / PIECE:,.1f}/{self.total / PIECE:,.1f} MB {rate:,.1f} MB/s"
        )

    def end(self) -> None:
        if self.shown:
            self.out.write("\n")
            self.out.flush()


def _conversation(client: RelaydeskClient, args: argparse.Namespace) -> str:
    saved = saved_for(args)
    chosen = args.conversation or os.environ.get("RELAYDESK_CONVERSATION_ID")
    chosen = chosen or (saved.conversation_id if saved else None)
    if chosen:
        return str(chosen)
    conversations = client.conversations()
    if len(conversations) != 1:
        raise UsageError("name a conversation with --conversation")
    return conversations[0]["conversation_id"]


def _relay(client: RelaydeskClient, args: argparse.Namespace, conversation: str) -> str:
    if args.relay:
        return str(args.relay)
    rows = [
        r
        for r in client.desktops(conversation)
        if (r.get("kind"), r.get("slot")) == (args.kind, args.slot)
    ]
    relays = {str(r.get("relay_name") or r.get("relay_id")) for r in rows}
    if len(relays) != 1:
        raise UsageError(
            f"name the relay with --relay ({len(relays)} run a {args.kind} "
            f"desktop in slot {args.slot!r})"
        )
    return relays.pop()


def _base(client: RelaydeskClient, args: argparse.Namespace) -> str:
    conversation = _conversation(client, args)
    relay = _relay(client, args, conversation)
    return f"/api/v1/conversations/{conversation}/files/{relay}/{args.kind}/{args.slot}"


def _pieces(handle: IO[bytes], progress: Progress) -> Iterator[bytes]:
    while piece := handle.read(PIECE):
        progress.add(len(piece))
        yield piece


def _put(client: RelaydeskClient, args: argparse.Namespace) -> dict[str, Any]:
    from relaydesk.client import answer_of

    local = Path(args.local)
    if not local.is_file():
        raise UsageError(f"{local}: not a file")
    remote = args.remote or f"Downloads/{local.name}"
    base = _base(client, args)
    size = local.stat().st_size
    offset = 0
    if args.resume:
        held = answer_of(client.http.get(f"{base}/upload", params={"path": remote}))
        offset = int(held["offset"])
    query = {
        "path": remote,
        "offset": str(offset),
        "exists": "replace" if args.replace else "rename",
    }
    progress = Progress(size, offset, not args.no_progress and not args.json)
    with local.open("rb") as handle:
        handle.seek(offset)
        try:
            response = client.http.post(
                f"{base}/upload",
                params=query,
                content=_pieces(handle, progress),
                headers={"Content-Length": str(size - offset)},
                timeout=None,
            )
        finally:
            progress.end()
    return answer_of(response)


def _get(client: RelaydeskClient, args: argparse.Namespace) -> dict[str, Any]:
    from relaydesk.client import answer_of

    local = Path(args.local or Path(args.remote).name)
    offset = local.stat().st_size if args.resume and local.exists() else 0
    base = _base(client, args)
    query = {"path": args.remote, "offset": str(offset)}
    with client.http.stream("GET", f"{base}/download", params=query, timeout=None) as response:
        if response.status_code != 200:
            response.read()
            answer_of(response)  # raises the server's error
        size = int(response.headers.get("X-Relaydesk-File-Size", "0"))
        progress = Progress(size, offset, not args.no_progress and not args.json)
        try:
            with local.open("ab" if offset else "wb") as handle:
                for piece in response.iter_bytes(PIECE):
                    handle.write(piece)
                    progress.add(len(piece))
        finally:
            progress.end()
    return {"path": args.remote, "local": str(local), "size": local.stat().st_size}


def _ls(client: RelaydeskClient, args: argparse.Namespace) -> dict[str, Any]:
    conversation = _conversation(client, args)
    where = {"kind": args.kind, "slot": args.slot}
    if args.relay:
        where["relay"] = args.relay
    return client.action("desktop_files_list", conversation, path=args.remote, **where)


def _table(result: dict[str, Any]) -> str:
    lines = []
    for entry in result.get("entries", []):
        when = datetime.fromtimestamp(float(entry["mtime"]), UTC).strftime("%Y-%m-%d %H:%M")
        kind = {"dir": "d", "link": "l", "other": "?"}.get(entry["type"], "-")
        lines.append(f"{kind} {entry['size']:>12,} {when} {entry['name']}")
    return "\n".join(lines)


def _render(call: Any) -> Any:
    if call is _ls:
        return _table
    return lambda result: f"{result.get('path')} ({result.get('size')} bytes)"


def _run(call: Any, args: argparse.Namespace) -> int:
    return run_api(call, args, _render(call))
