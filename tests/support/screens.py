"""Screen fixtures: a module's private Xvfb, an X recorder over a display, the screen service.

A test module names its fixtures by assigning them::

    xvfb = private_screen(1280, 800)
    recorder = recorder_on("xvfb")
    service = screen_service()

Never the developer's own
``DISPLAY``: every display here is an Xvfb this test run started.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from relay.screen.service import ScreenService
from tests.support.processes import scaled
from tests.support.xrecorder import XRecorder
from tests.support.xvfb import XvfbServer, private_xvfb


def private_screen(width: int, height: int) -> Any:
    """A module-scoped fixture: a private Xvfb of that size, stopped after the module."""

    @pytest.fixture(scope="module")
    def screen() -> Iterator[XvfbServer]:
        with private_xvfb(width, height) as server:
            yield server

    return screen


def recorder_on(screen: str) -> Any:
    """A fixture: a window over the display of the fixture ``screen`` recording every input
    event, stopped after the test."""

    @pytest.fixture
    def recorder(request: pytest.FixtureRequest) -> Iterator[XRecorder]:
        server: XvfbServer = request.getfixturevalue(screen)
        rec = XRecorder(server.display, scaled(10))
        try:
            yield rec
        finally:
            rec.stop()

    return recorder


def screen_service() -> Any:
    """A fixture: the relay's screen service, closed after the test."""

    @pytest.fixture
    async def service() -> AsyncIterator[ScreenService]:
        svc = ScreenService()
        try:
            yield svc
        finally:
            await svc.aclose()

    return service
