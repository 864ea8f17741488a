"""Identifier types shared by every part of relaydesk."""

from __future__ import annotations

from typing import NewType

RelayId = NewType("RelayId", str)
DesktopSessionId = NewType("DesktopSessionId", str)
RequestId = NewType("RequestId", str)
ChannelId = NewType("ChannelId", int)
UserId = NewType("UserId", str)
ConversationId = NewType("ConversationId", str)
