"""``Desktop.create()`` against a real server, relay and desktops: it starts a desktop or takes
the running one, looks and acts on it, and its ``with`` block stops only a desktop it started."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from relaydesk_client import ApiError, Desktop
from tests.e2e.viewer_stack import ViewerStack, viewer_stack

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ViewerStack]:
    async with viewer_stack(tmp_path_factory.mktemp("client-desktop")) as stack:
        yield stack


async def running(stack: ViewerStack) -> dict[str, str]:
    """The running desktops of the conversation: session id → slot."""
    rows = (await stack.action("desktop_list_active"))["desktops"]
    return {row["desktop_session_id"]: row["slot"] for row in rows if row["state"] == "running"}


def create(stack: ViewerStack, **args: Any) -> Desktop:
    return Desktop.create(url=stack.url, token=stack.seed.api_token, **args)


async def test_a_desktop_it_started_is_stopped_when_the_block_ends(stack: ViewerStack) -> None:
    def use() -> tuple[Desktop, bytes, dict[str, Any], str]:
        with create(stack, slot="made", profile="minimal") as desktop:
            shot = desktop.screenshot()
            clicked = desktop.click(shot.width // 2, shot.height // 2)
            desktop.type_text("made")
            during = desktop.desktop_session_id
        return desktop, shot.image, clicked, during

    desktop, image, clicked, session = await asyncio.to_thread(use)
    assert desktop.started and desktop.stopped
    assert image.startswith(PNG_MAGIC)
    assert clicked["ok"] is True, clicked
    assert desktop.viewer_url.startswith(("/", "http")), desktop.viewer_url
    assert session not in await running(stack)
    audit = [(row.op, row.outcome) for row in await stack.app.state.parts.store.list_audit()]
    assert ("desktop.stop_confirm", "stopped") in audit, audit


async def test_a_desktop_it_found_running_keeps_running_after_the_block(
    stack: ViewerStack,
) -> None:
    """A person's desktop, taken by an agent's ``with Desktop.create()``: still there after."""
    mine = await stack.action("desktop_start", person=True, slot="shared", geometry="1280x800")
    session = mine["desktop"]["desktop_session_id"]
    try:

        def use() -> tuple[Desktop, int]:
            with create(stack, slot="shared") as desktop:
                width = desktop.screenshot().width
            return desktop, width

        desktop, width = await asyncio.to_thread(use)
        assert desktop.desktop_session_id == session
        assert (desktop.started, desktop.stopped, width) == (False, False, 1280)
        assert (await running(stack)).get(session) == "shared"
    finally:
        await stack.action(
            "desktop_stop_confirm",
            person=True,
            relay=stack.relay_id,
            kind="virtual",
            slot="shared",
            desktop_session_id=session,
        )


async def test_stop_stops_a_desktop_it_found_running_when_asked(stack: ViewerStack) -> None:
    first = await asyncio.to_thread(create, stack, slot="asked")
    try:
        again = await asyncio.to_thread(create, stack, slot="asked")
        assert (first.started, again.started) == (True, False)
        assert again.desktop_session_id == first.desktop_session_id
        assert await asyncio.to_thread(again.stop) is True
        assert first.desktop_session_id not in await running(stack)
        again.close()
    finally:
        first.stopped = True  # stopped above; the block below must not try again
        first.__exit__(None, None, None)


async def test_bad_arguments_answer_400_naming_the_field(stack: ViewerStack) -> None:
    def call(**args: Any) -> ApiError:
        with pytest.raises(ApiError) as caught:
            create(stack, **args)
        return caught.value

    profile = await asyncio.to_thread(call, slot="bad", profile="Not A Profile")
    assert (profile.status, profile.code, profile.details.get("field")) == (
        400,
        "invalid_args",
        "profile",
    )
    slot = await asyncio.to_thread(call, slot="Not A Slot")
    assert (slot.status, slot.code, slot.details.get("field")) == (400, "invalid_args", "slot")

    def click_unseen() -> ApiError:
        with create(stack, slot="unseen") as desktop, pytest.raises(ApiError) as caught:
            desktop.click(10, 10)  # no screenshot yet: nothing to guard the click with
        return caught.value

    unseen = await asyncio.to_thread(click_unseen)
    assert (unseen.status, unseen.code) == (400, "missing_screen_revision"), unseen
    assert not [slot for slot in (await running(stack)).values() if slot in ("bad", "unseen")]


async def test_it_names_the_missing_setting_and_the_conversations(
    stack: ViewerStack, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("RELAYDESK_SERVER_URL", raising=False)
    monkeypatch.delenv("RELAYDESK_URL", raising=False)
    with pytest.raises(ValueError, match=r"RELAYDESK_SERVER_URL"):
        Desktop.create(token=stack.seed.api_token)
    monkeypatch.setenv("RELAYDESK_CONVERSATION_ID", "0" * 32)
    with pytest.raises(ApiError) as caught:
        await asyncio.to_thread(create, stack)
    assert caught.value.status in (403, 404), caught.value
