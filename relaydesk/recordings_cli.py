"""``relaydesk recordings list|export|delete``: a conversation's recordings through the
server's HTTP API (docs/recording.md), with an API token like ``relaydesk desktops``.

``export`` saves the trajectory (a zip of JSON Lines and pictures), or with ``--video`` the
video (WebM). Exit status: 0 done, 1 refused or failed (the message says why), 2 bad usage.
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from relaydesk.desktops_cli import run_api
from relaydesk.files_cli import _conversation

if TYPE_CHECKING:
    from relaydesk.client import RelaydeskClient

PIECE: Final = 1024 * 1024


def add_recordings(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "recordings",
        help="list, export and delete a conversation's recordings (needs an API token)",
        description="A conversation's recordings of desktops: list them, export one as a "
        "trajectory or a video, delete one (owners) (docs/recording.md).",
    )
    rsub = p.add_subparsers(dest="recordings_command", required=True, metavar="COMMAND")
    listing = rsub.add_parser("list", help="the conversation's recordings, newest first")
    _common(listing)
    listing.set_defaults(func=lambda args: run_api(_list, args, _table))
    export = rsub.add_parser(
        "export",
        help="save a recording's trajectory (zip) or its video (--video)",
        description="Save RECORDING_ID's trajectory export (JSON Lines and pictures in a zip), "
        "or its video with --video, to OUTPUT (default: <id>-trajectory.zip, or <id>.mp4 / .webm).",
    )
    export.add_argument("recording_id", help="the recording (rec_…)")
    export.add_argument("output", nargs="?", default=None, help="the file to write")
    export.add_argument("--video", action="store_true", help="the video (WebM) instead")
    export.add_argument("--images", choices=("png", "jpeg"), default="png", help="picture format")
    _common(export)
    export.set_defaults(func=lambda args: run_api(_export, args, _saved))
    delete = rsub.add_parser("delete", help="delete a recording (owners only)")
    delete.add_argument("recording_id", help="the recording (rec_…)")
    _common(delete)
    delete.set_defaults(
        func=lambda args: run_api(_delete, args, lambda r: f"deleted {r['deleted']}")
    )


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--server", default=None, help="the server's URL (RELAYDESK_SERVER_URL)")
    p.add_argument(
        "--token-file", default=None, help="file holding an API token (RELAYDESK_API_TOKEN)"
    )
    p.add_argument(
        "--conversation", default=None, help="conversation id (RELAYDESK_CONVERSATION_ID)"
    )
    p.add_argument("--json", action="store_true", help="print one JSON object (for scripts)")


def _base(client: RelaydeskClient, args: argparse.Namespace) -> str:
    return f"/api/v1/conversations/{_conversation(client, args)}/recordings"


def _list(client: RelaydeskClient, args: argparse.Namespace) -> dict[str, Any]:
    return client.get(_base(client, args))


def _delete(client: RelaydeskClient, args: argparse.Namespace) -> dict[str, Any]:
    from relaydesk.client import answer_of

    return answer_of(client.http.delete(f"{_base(client, args)}/{args.recording_id}"))


def _export(client: RelaydeskClient, args: argparse.Namespace) -> dict[str, Any]:
    from relaydesk.client import answer_of

    one = f"{_base(client, args)}/{args.recording_id}"
    if args.video:
        path, params = f"{one}/video", {}
    else:
        path, params = f"{one}/trajectory", {"images": args.images}
    with client.http.stream("GET", path, params=params, timeout=None) as response:
        if response.status_code != 200:
            response.read()
            answer_of(response)  # raises the server's error
        kind = response.headers.get("content-type", "")
        suffix = {"video/mp4": ".mp4", "video/webm": ".webm"}.get(kind, "-trajectory.zip")
        output = Path(args.output or f"{args.recording_id}{suffix}")
        with output.open("wb") as handle:
            for piece in response.iter_bytes(PIECE):
                handle.write(piece)
    return {"recording_id": args.recording_id, "path": str(output), "size": output.stat().st_size}


def _saved(result: dict[str, Any]) -> str:
    return f"{result['path']} ({result['size']} bytes)"


def _table(result: dict[str, Any]) -> str:
    lines = []
    for rec in result.get("recordings", []):
        when = datetime.fromtimestamp(rec["start_ms"] / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")
        length = f"{rec['duration_ms'] // 60000}:{rec['duration_ms'] // 1000 % 60:02d}"
        state = "recording" if rec["recording"] else length
        actors = ", ".join(rec.get("actors") or []) or "-"
        lines.append(
            f"{rec['recording_id']}  {when}  {rec['kind']}/{rec['slot']}  {state:>9}  "
            f"{rec['bytes'] / 1e6:7.1f} MB  {actors}"
        )
    return "\n".join(lines) or "no recordings in this conversation"
