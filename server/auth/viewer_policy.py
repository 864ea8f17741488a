"""No agent's viewer on a relay that denies apps: a VNC stream cannot be masked.

A relay with ``RELAYDESK_DENY_APPS`` says so in its ``hello`` (``denied_apps``). The screen
tool paints a denied app's windows black, but a viewer streams the desktop as x11vnc sees it,
so the server gives an agent (an API token) no viewer of such a relay's desktops: no viewer URL
from ``desktop_start`` and ``desktop_attach``, and a view-only capability is refused when its
stream opens — read from the relay's capabilities at that moment, since a relay may connect
again with others. A person's viewer is not affected.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Final

from wire.errors import ErrorCode, OpError
from wire.ops import DENIED_APPS_CAPABILITY

AGENT_VIEWER_DENIED: Final = (
    "this relay denies apps to agents, and a viewer's stream cannot be masked: no viewer for "
    "an API token here (use the screen tool, which hides denied apps)"
)


def agent_viewer_refusal(person: bool, capabilities: Collection[str]) -> OpError | None:
    """Why a viewer for an agent (``person`` false) may not be had on a relay announcing
    ``capabilities`` (``policy_denied``, 403); None when it may."""
    if person or DENIED_APPS_CAPABILITY not in capabilities:
        return None
    return OpError(ErrorCode.POLICY_DENIED, AGENT_VIEWER_DENIED)
