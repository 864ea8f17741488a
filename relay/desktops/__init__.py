"""Virtual desktops on the relay: process lifecycle, watchdog, compare-and-stop, re-adoption.

See docs/desktops.md.
"""

from __future__ import annotations

from relay.desktops.config import DesktopConfig
from relay.desktops.launch import missing_binaries
from relay.desktops.manager import DesktopManager, OnChange

__all__ = ["DesktopConfig", "DesktopManager", "OnChange", "missing_binaries"]
