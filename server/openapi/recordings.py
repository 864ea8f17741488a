"""The recordings routes in the OpenAPI document (docs/recording.md)."""

from __future__ import annotations

from typing import Final

from server.openapi.parts import MEMBER_READ, MEMBER_WRITE, Json, answer, header, media, operation
from server.openapi.parts import query as query_parameter

BASE: Final = "/api/v1/conversations/{conversation_id}/recordings"
ONE: Final = f"{BASE}/{{recording_id}}"
AUTH: Final = (
    "A member of the conversation (API token or cookie session). A recording belongs to the "
    "conversation it was turned on in (`desktop_start {record: true}` or `desktop_record`); "
    "from any other it is 404 `not_found`, like an unknown id. A malformed id is 400 naming "
    "`recording_id`."
)
STRING: Final[Json] = {"type": "string"}

RECORDINGS: Final[dict[tuple[str, str], Json]] = {
    ("GET", BASE): operation(
        "recordings_list",
        "The conversation's recordings",
        tag="recordings",
        security=MEMBER_READ,
        description=f"{AUTH} Role read. Newest first.",
        responses=answer(
            "`{ok, recordings: [{recording_id, desktop_session_id, relay_id, kind, slot, "
            "started_by, start_ms, end_ms, duration_ms, recording, segments, bytes, width, "
            "height, codec, actors}]}` (times: wall-clock UTC milliseconds)."
        ),
    ),
    ("GET", ONE): operation(
        "recording_show",
        "One recording and its timeline",
        tag="recordings",
        security=MEMBER_READ,
        description=f"{AUTH} Role read; audited (`recording.view`). Timeline events: "
        "`{id, at_ms, t_ms (on the video), kind, name, door, actor, outcome, reason, summary, "
        "point?, guard?, difference?}`; kinds `agent_action`, `refused`, `takeover`, "
        "`hand_back`, `grant`, `stop`, `chat`, `lifecycle`, `viewer`.",
        responses=answer("`{ok, recording, timeline}`."),
    ),
    ("DELETE", ONE): operation(
        "recording_delete",
        "Delete a recording",
        tag="recordings",
        security=MEMBER_WRITE,
        description=f"{AUTH} Role owner; audited (`recording.delete`). 409 while the desktop "
        "is still recorded.",
        responses=answer("`{ok, deleted}`."),
    ),
    ("GET", f"{ONE}/video"): operation(
        "recording_video",
        "The recording's video (WebM, VP8)",
        tag="recordings",
        security=MEMBER_READ,
        description=f"{AUTH} Role read; audited once per watch (`recording.watch`). HTTP "
        "Range requests are answered with 206; a malformed `Range` is 416 naming `Range`.",
        parameters=[header("Range", "One byte range, e.g. `bytes=0-1023`.")],
        responses=media("The video.", "video/webm"),
    ),
    ("GET", f"{ONE}/trajectory"): operation(
        "recording_trajectory",
        "Export the recording as a trajectory (JSON Lines and pictures, zipped)",
        tag="recordings",
        security=MEMBER_READ,
        description=f"{AUTH} Role read; audited (`recording.export`). `trajectory.jsonl`: a "
        "`recording` line, then one `step` line per agent action with `before` and `after` "
        'pictures under `images/` (docs/recording.md, "Trajectory format"). A bad parameter '
        "is 400 naming it.",
        parameters=[
            query_parameter("images", "`png` (default) or `jpeg`.", STRING),
            query_parameter(
                "steps", "`agent` (default: agent actions) or `all` (every event).", STRING
            ),
            query_parameter("max_steps", "At most this many steps (1 to 10000).", STRING),
        ],
        responses=media("The zip.", "application/zip"),
    ),
}
