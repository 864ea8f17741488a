"""The relay half of the screen tool: XTEST input, mss capture, the stale-screen guard check.

Entry point: :class:`relay.screen.service.ScreenService`. See ``docs/screen-tool.md``.
"""

from __future__ import annotations

from relay.screen.service import ACTIONS, ScreenService, ScreenshotResult

__all__ = ["ACTIONS", "ScreenService", "ScreenshotResult"]
