"""Recording a real desktop: the relay encodes its framebuffer, the server keeps the
segments, and the recording's video, timeline and trajectory show what the agent and the
person did (docs/recording.md). The session played: ``tests/support/recording_session.py``.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import time
import zipfile
from collections.abc import AsyncIterator
from typing import Any

import av
import httpx
import numpy as np
import pytest
import pytest_asyncio

from benchmarks.bench_audio import tone
from server import admin
from tests.e2e.viewer_stack import Desktop, ViewerStack, viewer_stack
from tests.support.processes import scaled
from tests.support.recording_session import (
    CLICK,
    GREY,
    RED,
    RELAY_ENV,
    base,
    colour_of,
    frame_at,
    get,
    near,
    picture,
    play_session,
    spool,
)
from tests.support.stack import relaydesk_argv, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ViewerStack]:
    async with viewer_stack(tmp_path_factory.mktemp("rec"), relay_env=RELAY_ENV) as s:
        yield s


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def session(stack: ViewerStack) -> dict[str, Any]:
    return await play_session(stack)


async def test_the_recording_is_listed_with_who_acted(stack, session):
    response = await get(stack, base(stack))
    assert response.status_code == 200, response.text
    (listed,) = [
        r for r in response.json()["recordings"] if r["recording_id"] == session["recording_id"]
    ]
    assert listed["desktop_session_id"] == session["sid"]
    assert listed["recording"] is False and listed["duration_ms"] > 2000
    assert listed["segments"] >= 1 and listed["codec"] == "h264"
    assert stack.seed.user["username"] in listed["actors"]


async def test_the_timeline_has_each_event_once_and_in_order(stack, session):
    response = await get(stack, f"{base(stack)}/{session['recording_id']}")
    assert response.status_code == 200, response.text
    events = response.json()["timeline"]
    names = [(e["name"], e["outcome"]) for e in events]
    wanted = [
        ("screen.screenshot", "ok"),
        ("screen.click", "ok"),
        ("screen.screenshot", "ok"),
        ("screen.click", "refused"),
        ("desktop.take_control", "ok"),
        ("desktop.hand_back", "ok"),
        ("agent.stop", "stopped"),
        ("viewer.joined", "person"),
        ("viewer.left", "person"),
        ("desktop.record", "off"),
    ]
    assert all(item in names for item in wanted), " ".join(f"{n}:{o}" for n, o in names)
    rest = iter(names)
    assert all(item in rest for item in wanted), names  # in this order
    assert ("control.changed", "person") not in names  # the take_control row says it
    clicks = [e for e in events if e["name"] == "screen.click"]
    assert len(clicks) == 2, names
    assert clicks[0]["point"] == {"x": CLICK[0], "y": CLICK[1]} and clicks[0]["guard"] == "passed"
    assert clicks[1]["guard"] == "stale" and clicks[1]["kind"] == "refused"
    assert clicks[0]["door"] == "HTTP"
    ats = [e["at_ms"] for e in events]
    assert ats == sorted(ats)
    assert len({e["id"] for e in events}) == len(events)
    kinds = {e["kind"] for e in events}
    assert {"agent_action", "refused", "takeover", "hand_back", "stop"} <= kinds


async def test_the_video_shows_the_click_at_its_moment_and_not_before(stack, session):
    path = f"{base(stack)}/{session['recording_id']}"
    events = (await get(stack, path)).json()["timeline"]
    click = next(e for e in events if e["name"] == "screen.click" and e["outcome"] == "ok")
    shot, seen = (e for e in events if e["name"] == "screen.screenshot")
    response = await get(stack, f"{path}/video")
    assert response.status_code == 200
    assert response.headers["content-type"] == "video/mp4"
    video = response.content
    # Within 100 ms of the click's moment on the timeline, the video shows what it did (until
    # the screenshot that saw it, after which the session paints the window blue); at the
    # moment itself when the click's own answer saw it done (effect: changed).
    moments = f"click at {click['t_ms']} ms, the next screenshot at {seen['t_ms']} ms"
    soon = min(click["t_ms"] + 100, seen["t_ms"])
    assert near(colour_of(frame_at(video, soon)), RED), moments
    if session["click_effect"] == "changed":
        assert near(colour_of(frame_at(video, click["t_ms"])), RED), moments
    assert near(colour_of(frame_at(video, shot["t_ms"])), GREY), moments
    ranged = await get(stack, f"{path}/video", Range="bytes=0-99")
    assert ranged.status_code == 206 and ranged.content == video[:100]


async def test_the_trajectory_has_one_step_per_agent_action_with_pictures(stack, session):
    path = f"{base(stack)}/{session['recording_id']}/trajectory"
    response = await get(stack, path)
    assert response.status_code == 200, response.text
    archive = zipfile.ZipFile(io.BytesIO(response.content))
    lines = [json.loads(line) for line in archive.read("trajectory.jsonl").splitlines()]
    assert lines[0]["type"] == "recording"
    steps = lines[1:]
    assert [s["name"] for s in steps] == [
        "screen.screenshot",
        "screen.click",
        "screen.screenshot",
        "screen.click",
    ]
    click = steps[1]
    after, before = (picture(archive.read(click[side])) for side in ("after", "before"))
    assert near(colour_of(after), RED) and near(colour_of(before), GREY)
    assert "text" not in json.dumps(steps)


async def test_a_read_member_watches_but_cannot_delete_and_another_conversation_sees_nothing(
    stack, session
):
    store = stack.app.state.parts.store
    await admin.create_user(store, "reader")
    await store.add_member(
        stack.seed.conversation_id, (await store.get_user_by_name("reader")).user_id, "read"
    )
    token = (await admin.create_token(store, "reader"))["token"]
    one = f"{base(stack)}/{session['recording_id']}"
    assert (await get(stack, base(stack), token)).status_code == 200
    assert (await get(stack, f"{one}/video", token)).status_code == 200
    async with httpx.AsyncClient(base_url=stack.url, timeout=scaled(30)) as client:
        refused = await client.delete(one, headers={"Authorization": f"Bearer {token}"})
    assert refused.status_code == 403
    other = (await admin.create_conversation(store, "other", ["reader:owner"]))["conversation_id"]
    elsewhere = await get(stack, f"{base(stack, other)}/{session['recording_id']}", token)
    assert elsewhere.status_code == 404
    assert session["recording_id"] not in (await get(stack, base(stack, other), token)).text


async def test_bad_input_names_the_field(stack, session):
    unknown = await get(stack, f"{base(stack)}/rec_{'0' * 24}")
    assert unknown.status_code == 404
    malformed = await get(stack, f"{base(stack)}/nope")
    assert malformed.status_code == 400 and malformed.json()["error"]["field"] == "recording_id"
    one = f"{base(stack)}/{session['recording_id']}"
    bad_range = await get(stack, f"{one}/video", Range="pages=1-2")
    assert bad_range.status_code == 416 and bad_range.json()["error"]["field"] == "Range"
    for query, field in (
        ("images=gif", "images"),
        ("max_steps=0", "max_steps"),
        ("colour=1", "colour"),
    ):
        bad = await get(stack, f"{one}/trajectory?{query}")
        assert bad.status_code == 400 and bad.json()["error"]["field"] == field


async def test_the_cli_lists_and_exports(stack, session, tmp_path):
    env = {
        **os.environ,
        "RELAYDESK_SERVER_URL": stack.url,
        "RELAYDESK_API_TOKEN": stack.seed.api_token,
        "RELAYDESK_CONVERSATION_ID": stack.seed.conversation_id,
    }

    async def cli(*args: str) -> str:
        process = await asyncio.create_subprocess_exec(
            *relaydesk_argv("recordings", *args),
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(process.communicate(), scaled(60))
        assert process.returncode == 0, err.decode()
        return out.decode()

    assert session["recording_id"] in await cli("list")
    target = tmp_path / "trajectory.zip"
    await cli("export", session["recording_id"], str(target))
    assert "trajectory.jsonl" in zipfile.ZipFile(target).namelist()
    video = tmp_path / "video.mp4"
    await cli("export", "--video", session["recording_id"], str(video))
    assert video.read_bytes()[4:8] == b"ftyp"  # an MP4 file


async def test_owners_delete_retention_purges_and_every_look_is_audited(stack, session):
    one = f"{base(stack)}/{session['recording_id']}"
    async with httpx.AsyncClient(base_url=stack.url, timeout=scaled(30)) as client:
        bearer = {"Authorization": f"Bearer {stack.seed.api_token}"}
        deleted = await client.delete(one, headers=bearer)
    assert deleted.status_code == 200, deleted.text
    assert (await get(stack, one)).status_code == 404
    # A second, short recording of the same desktop, ended: the retention purge takes it.
    target = {"desktop_session_id": session["sid"]}
    on = await stack.action("desktop_record", on=True, **target)
    await asyncio.sleep(1.0)
    await stack.action("desktop_record", on=False, **target)
    second = f"{base(stack)}/{on['recording_id']}"
    assert (await get(stack, second)).status_code == 200
    recordings = stack.app.state.parts.recordings
    assert await recordings.purge(0) == 0  # nothing ended before 1970
    assert await recordings.purge(2**42) == 1
    assert (await get(stack, second)).status_code == 404
    ops = {row.op for row in await stack.app.state.parts.store.list_audit(limit=5000)}
    assert {"recording.view", "recording.watch", "recording.export", "recording.delete"} <= ops


def loudness(video: bytes, start_s: float, end_s: float) -> tuple[int, float]:
    """How many audio samples the video has between the two moments, and their RMS (of full
    scale: the decoder's samples are floats)."""
    heard: list[np.ndarray] = []
    with av.open(io.BytesIO(video), "r") as container:
        for frame in container.decode(audio=0):
            if frame.time is None or not start_s <= frame.time < end_s:
                continue
            heard.append(frame.to_ndarray().astype(np.float64).ravel())
    samples = np.concatenate(heard) if heard else np.zeros(0)
    return len(samples), float(np.sqrt(np.mean(samples**2))) if len(samples) else 0.0


async def test_a_desktop_with_sound_is_heard_on_its_video_and_one_without_has_no_track(stack):
    started = await stack.action(
        "desktop_start", slot="sound", geometry="800x600", audio=True, record=True
    )
    sid = started["desktop"]["desktop_session_id"]
    rows = await stack.relays.request(stack.relay_id, "desktop.status", {}, 10.0)
    row = next(d for d in rows["desktops"] if d["desktop_session_id"] == sid)
    assert row["audio"] is True, row
    display = row["display"]
    sounding = Desktop(sid, "sound", display, 0, 0, started["viewer_url"])
    await asyncio.sleep(2.5)  # quiet first
    played_ms = time.time_ns() // 1_000_000
    with tone(display, 2.0):
        await asyncio.sleep(2.0)
    await asyncio.sleep(1.0)
    await stack.action("desktop_record", on=False, desktop_session_id=sid)
    folder = spool(stack, sid)
    await wait_until(lambda: not folder.exists(), scaled(60), "every segment handed over")
    await stack.stop_desktop(sounding)  # the relay's desktops are few
    one = f"{base(stack)}/{started['recording_id']}"
    listed = (await get(stack, one)).json()["recording"]
    video = (await get(stack, f"{one}/video")).content
    with av.open(io.BytesIO(video), "r") as container:
        assert [s.codec_context.name for s in container.streams.audio] == ["aac"]
    tone_s = (played_ms - listed["start_ms"]) / 1000
    quiet_samples, quiet = loudness(video, 0.3, tone_s - 0.3)
    loud_samples, loud = loudness(video, tone_s + 0.5, tone_s + 1.5)
    assert quiet_samples > 0 and loud_samples > 0, (quiet_samples, loud_samples)
    assert quiet < 0.001, f"silence before the tone (RMS {quiet:.4f})"
    assert loud > 0.01, f"the tone is heard at its moment (RMS {loud:.4f})"
    # A desktop without sound records its picture only.
    mute = await stack.action(
        "desktop_start", slot="mute", geometry="800x600", audio=False, record=True
    )
    mute_sid = mute["desktop"]["desktop_session_id"]
    await asyncio.sleep(1.5)
    await stack.action("desktop_record", on=False, desktop_session_id=mute_sid)
    await stack.stop_desktop(Desktop(mute_sid, "mute", "", 0, 0, mute["viewer_url"]))
    folder = spool(stack, mute_sid)
    await wait_until(lambda: not folder.exists(), scaled(60), "every segment handed over")
    video = (await get(stack, f"{base(stack)}/{mute['recording_id']}/video")).content
    with av.open(io.BytesIO(video), "r") as container:
        assert len(container.streams.video) == 1 and not container.streams.audio


async def test_a_conversation_that_records_by_default_records_its_new_desktops(stack):
    env = {**os.environ, **stack.seed.env()}
    argv = relaydesk_argv("admin", "set-conversation", stack.seed.conversation_id, "--record")
    process = await asyncio.create_subprocess_exec(
        *argv, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    _out, err = await asyncio.wait_for(process.communicate(), scaled(60))
    assert process.returncode == 0, err.decode()
    started = await stack.action("desktop_start", slot="second", geometry="800x600")
    assert started["recording"] is True and started["desktop"]["recording"] is True
    rows = await stack.relays.request(stack.relay_id, "desktop.status", {}, 10.0)
    sid = started["desktop"]["desktop_session_id"]
    display = next(d for d in rows["desktops"] if d["desktop_session_id"] == sid)["display"]
    stack.desktops.append(Desktop(sid, "second", display, 0, 0, started["viewer_url"]))
    listed = await stack.action("desktop_list_active")
    row = next(r for r in listed["desktops"] if r["desktop_session_id"] == sid)
    assert row["recording"] is True  # the dock's REC mark reads this
    unrecorded = await stack.action("desktop_start", slot="third", geometry="800x600", record=False)
    assert "recording" not in unrecorded["desktop"]
    third = unrecorded["desktop"]["desktop_session_id"]
    stack.desktops.append(Desktop(third, "third", "", 0, 0, unrecorded["viewer_url"]))
