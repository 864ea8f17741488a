"""examples/anthropic_agent.py and examples/openai_agent.py: the official SDKs' loops against a
real server, a real relay and a real desktop running an editor (mousepad).

Only the model is replaced: its recorded answers are served through the SDK's own HTTP
transport (no model service is reachable here). The recorded model clicks into the editor,
types and saves; the test reads the file the editor wrote, and checks what the SDK sent the
model back (the screenshots and the effect lines).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx2  # the SDKs' HTTP library
import pytest
import pytest_asyncio
from Xlib import X
from Xlib import display as xdisplay

from tests.support.processes import scaled
from tests.support.recorded import recorded_desktops
from tests.support.stack import Seed, wait_until
from wire.ids import RelayId

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

# The examples (and the SDKs they load, ~4 s) are imported by the tests that run them: every
# run of the suite collects this module, the fast loop included.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))

SIZE = (1280, 800)


class Desk:
    def __init__(self, url: str, seed: Seed, display: str) -> None:
        self.url, self.seed, self.display = url, seed, display


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def desk(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Desk]:
    async with recorded_desktops(tmp_path_factory.mktemp("cu-examples"), {"main": SIZE}) as parts:
        app, url, seed, relay_id, desktops = parts
        desktop = desktops["main"]
        desktop.recorder.stop()  # its window would take the editor's clicks
        desktop.stopped = True
        row = {"desktop_session_id": desktop.session_id, "kind": "virtual", "slot": "main"}
        await app.state.parts.inventory.record_started(RelayId(relay_id), row)
        yield Desk(url, seed, desktop.display)


def _shown_windows(display_name: str) -> dict[int, tuple[int, int, int, int]]:
    """The top-level windows that are showing: id → bounds."""
    conn = xdisplay.Display(display_name)
    try:
        shown = {}
        for window in conn.screen().root.query_tree().children:
            if window.get_attributes().map_state == X.IsViewable:
                g = window.get_geometry()
                shown[window.id] = (g.x, g.y, g.width, g.height)
        return shown
    finally:
        conn.close()


async def _editor(desk: Desk, path: Path) -> tuple[subprocess.Popen[bytes], list[int]]:
    """The editor on ``path``, and a point inside its text area."""
    path.write_text("", encoding="utf-8")
    env = {**os.environ, "DISPLAY": desk.display, "NO_AT_BRIDGE": "1"}
    before = set(_shown_windows(desk.display))
    editor = subprocess.Popen(
        ["mousepad", "--disable-server", str(path)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def new_window() -> tuple[int, int, int, int] | None:
        fresh = [b for w, b in _shown_windows(desk.display).items() if w not in before]
        return max(fresh, key=lambda b: b[2] * b[3]) if fresh else None

    await wait_until(lambda: new_window() is not None, scaled(20), "the editor")
    await asyncio.sleep(scaled(1))  # drawn
    bounds = new_window()
    assert bounds is not None
    x, y, width, height = bounds
    return editor, [x + width // 2, y + height // 2]


def _model(answers: list[dict[str, Any]], sent: list[dict[str, Any]]) -> Callable[..., Any]:
    """The recorded model: each request to the API gets the next recorded answer."""

    def handle(request: Any) -> Any:
        sent.append(json.loads(request.content or b"{}"))
        return httpx2.Response(200, json=answers[len(sent) - 1])

    return handle


def _message(n: int, content: list[dict[str, Any]], stop: str = "tool_use") -> dict[str, Any]:
    return {
        "id": f"msg_{n}",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-5-5",
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }


def _use(n: int, **tool_input: Any) -> list[dict[str, Any]]:
    return [{"type": "tool_use", "id": f"toolu_{n}", "name": "computer", "input": tool_input}]


async def test_the_anthropic_example_types_into_the_editor_and_saves(desk, tmp_path):
    note = tmp_path / "note.txt"
    editor, text_point = await _editor(desk, note)
    answers = [
        _message(1, _use(1, action="screenshot")),
        _message(2, _use(2, action="left_click", coordinate=text_point)),
        _message(3, _use(3, action="type", text="hello from Claude")),
        _message(4, _use(4, action="key", text="ctrl+s")),
        _message(5, [{"type": "text", "text": "Saved."}], "end_turn"),
    ]
    import anthropic
    import anthropic_agent

    sent: list[dict[str, Any]] = []
    client = anthropic.Anthropic(
        api_key="test",
        base_url="http://model.invalid",
        http_client=httpx2.Client(transport=httpx2.MockTransport(_model(answers, sent))),
    )
    door = anthropic_agent.Door(desk.url, desk.seed.conversation_id, "relay-1", desk.seed.api_token)
    try:
        said = await asyncio.to_thread(anthropic_agent.run, client, door, "write and save")
        assert said == "Saved."
        await wait_until(lambda: note.read_text(encoding="utf-8") != "", scaled(10), "the save")
        assert note.read_text(encoding="utf-8") == "hello from Claude"
    finally:
        editor.terminate()
        editor.wait(timeout=scaled(10))
    assert sent[0]["tools"][0] == {
        "type": "computer_20251124",
        "name": "computer",
        "display_width_px": 1280,
        "display_height_px": 800,
        "enable_zoom": True,
    }
    results = [m["content"][0] for m in sent[1]["messages"] if m["role"] == "user"][1:]
    shot = results[0]["content"][0]
    assert shot["type"] == "image" and shot["source"]["media_type"] == "image/png"
    typed = sent[3]["messages"][-1]["content"][0]
    assert typed["is_error"] is False
    assert typed["content"][0]["text"].startswith("effect: changed")


def _response(n: int, output: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "id": f"resp_{n}",
        "object": "response",
        "created_at": 0,
        "status": "completed",
        "model": "computer-use-preview",
        "output": output,
        "parallel_tool_calls": False,
        "tool_choice": "auto",
        "tools": [],
    }


def _call(n: int, action: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "type": "computer_call",
            "id": f"cu_{n}",
            "call_id": f"call_{n}",
            "action": action,
            "pending_safety_checks": [],
            "status": "completed",
        }
    ]


async def test_the_openai_example_types_into_the_editor_and_saves(desk, tmp_path):
    note = tmp_path / "gpt.txt"
    editor, text_point = await _editor(desk, note)
    words = [{"type": "output_text", "text": "Saved.", "annotations": []}]
    done = [
        {"type": "message", "id": "m", "role": "assistant", "status": "completed", "content": words}
    ]
    answers = [
        _response(1, _call(1, {"type": "screenshot"})),
        _response(
            2, _call(2, {"type": "click", "button": "left", "x": text_point[0], "y": text_point[1]})
        ),
        _response(3, _call(3, {"type": "type", "text": "hello from GPT"})),
        _response(4, _call(4, {"type": "keypress", "keys": ["CTRL", "S"]})),
        _response(5, done),
    ]
    import openai
    import openai_agent

    sent: list[dict[str, Any]] = []
    client = openai.OpenAI(
        api_key="test",
        base_url="http://model.invalid/v1",
        http_client=httpx2.Client(transport=httpx2.MockTransport(_model(answers, sent))),
    )
    door = openai_agent.Door(desk.url, desk.seed.conversation_id, "relay-1", desk.seed.api_token)
    try:
        said = await asyncio.to_thread(openai_agent.run, client, door, "write and save")
        assert said == "Saved."
        await wait_until(lambda: note.read_text(encoding="utf-8") != "", scaled(10), "the save")
        assert note.read_text(encoding="utf-8") == "hello from GPT"
    finally:
        editor.terminate()
        editor.wait(timeout=scaled(10))
    assert sent[0]["tools"][0] == {
        "type": "computer_use_preview",
        "display_width": 1280,
        "display_height": 800,
        "environment": "linux",
    }
    first = sent[1]["input"][0]
    assert first["type"] == "computer_call_output" and first["call_id"] == "call_1"
    assert first["output"]["image_url"].startswith("data:image/png;base64,")
    assert sent[1]["previous_response_id"] == "resp_1"
