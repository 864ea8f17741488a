"""The trajectory export: a recording's agent steps as JSON Lines and pictures, in a zip
(docs/recording.md, "Trajectory format").

``trajectory.jsonl`` starts with one ``recording`` line (the recording's summary), then one
``step`` line per agent action in order: the action (name, door, actor, argument summary,
click point, guard verdict), its outcome, and the pictures before and after it —
``images/NNNN-before.png`` is the screen as the previous step left it (the recording's first
picture for the first step), ``images/NNNN-after.png`` the screen when the action was done.
Pictures are decoded from the recording's video at those moments.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

import numpy as np
import numpy.typing as npt
from PIL import Image

from server.recordings.files import Recording, RecordingFiles
from server.recordings.video import frames_at, joined_video
from wire.errors import ErrorCode, InvalidArgs, OpError

FORMAT_VERSION: Final = 1
ImageFormat = Literal["png", "jpeg"]
STEP_KINDS: Final = frozenset({"agent_action", "refused"})
MAX_STEPS: Final = 10_000
PARAMS: Final = frozenset({"images", "steps", "max_steps"})


@dataclass(frozen=True)
class ExportParams:
    images: ImageFormat = "png"
    # ``agent``: agent actions (refused ones too); ``all``: every timeline event.
    steps: Literal["agent", "all"] = "agent"
    max_steps: int = MAX_STEPS


def export_params(query: Mapping[str, str]) -> ExportParams:
    """The export's query parameters, or ``invalid_args`` naming the first that is wrong."""
    for name in query:
        if name not in PARAMS:
            raise InvalidArgs(name, "unknown parameter (images, steps, max_steps)")
    images = query.get("images", "png")
    if images not in ("png", "jpeg"):
        raise InvalidArgs("images", "must be png or jpeg")
    steps = query.get("steps", "agent")
    if steps not in ("agent", "all"):
        raise InvalidArgs("steps", "must be agent or all")
    raw = query.get("max_steps", str(MAX_STEPS))
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_STEPS:
        raise InvalidArgs("max_steps", f"must be a whole number from 1 to {MAX_STEPS}")
    return ExportParams(images, steps, int(raw))  # type: ignore[arg-type]


def _encode(picture: npt.NDArray[np.uint8], fmt: ImageFormat) -> bytes:
    buffer = io.BytesIO()
    if fmt == "png":
        Image.fromarray(picture).save(buffer, format="PNG", compress_level=3)
    else:
        Image.fromarray(picture).save(buffer, format="JPEG", quality=85)
    return buffer.getvalue()


def trajectory_zip(
    files: RecordingFiles,
    recording: Recording,
    events: Sequence[dict[str, Any]],
    params: ExportParams,
) -> bytes:
    """The export's bytes."""
    video = joined_video(files, recording)
    if video is None:
        raise OpError(ErrorCode.NOT_FOUND, "this recording has no video yet")
    chosen = [e for e in events if params.steps == "all" or e["kind"] in STEP_KINDS]
    chosen = chosen[: params.max_steps]
    moments: list[int] = []
    previous = 0
    for event in chosen:
        moments += [previous, int(event["t_ms"])]
        previous = int(event["t_ms"])
    pictures = frames_at(video, moments)
    buffer = io.BytesIO()
    lines = [json.dumps({"type": "recording", "version": FORMAT_VERSION, **recording.summary()})]
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for index, event in enumerate(chosen):
            step = {"type": "step", "index": index, **event}
            for side, picture in zip(
                ("before", "after"), pictures[2 * index : 2 * index + 2], strict=True
            ):
                if picture is None:
                    step[side] = None
                    continue
                name = f"images/{index:04d}-{side}.{'png' if params.images == 'png' else 'jpg'}"
                archive.writestr(name, _encode(picture, params.images))
                step[side] = name
            lines.append(json.dumps(step))
        archive.writestr("trajectory.jsonl", "\n".join(lines) + "\n")
    return buffer.getvalue()
