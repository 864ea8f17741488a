"""``Desktop.observe()`` reads the accessibility tree of a real window on the desktop it took:
the tests' GTK form, on a desktop an agent's ``with Desktop.create()`` found running."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from relaydesk_client import Desktop
from tests.support.a11y_stack import FORM, A11yStack, a11y_stack

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[A11yStack]:
    async with a11y_stack(tmp_path_factory.mktemp("client-observe"), [FORM]) as stack:
        await stack.wait_app("a11y_app.py")
        yield stack


async def test_observe_reads_the_window_of_the_desktop_it_took(stack: A11yStack) -> None:
    def use() -> tuple[Desktop, dict[str, Any]]:
        with Desktop.create(url=stack.url, token=stack.seed.api_token) as desktop:
            return desktop, desktop.observe(window="relaydesk form")

    desktop, seen = await asyncio.to_thread(use)
    assert (desktop.desktop_session_id, desktop.started) == (stack.session_id, False)
    assert seen["desktop_session_id"] == stack.session_id
    for expected in ('push_button "Save"', 'check_box "Remember me"', 'text "Name"'):
        assert expected in seen["text"], seen["text"]
    # It found the desktop running, so the block left it running.
    listed = await stack.ok("desktop_list_active")
    assert [row["desktop_session_id"] for row in listed["desktops"]] == [stack.session_id]
