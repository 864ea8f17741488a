"""Virtual desktops on the relay: process lifecycle, watchdog, compare-and-stop, re-adoption.

See docs/desktops.md. The names below load on first use, so a small process that needs one
module (a desktop's orphan guard, ``relay/desktops/guard.py``) does not load the rest.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from relay.desktops.config import DesktopConfig
    from relay.desktops.launch import missing_binaries
    from relay.desktops.manager import DesktopManager, OnChange

__all__ = ["DesktopConfig", "DesktopManager", "OnChange", "missing_binaries"]

_WHERE = {
    "DesktopConfig": "relay.desktops.config",
    "DesktopManager": "relay.desktops.manager",
    "OnChange": "relay.desktops.manager",
    "missing_binaries": "relay.desktops.launch",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(name)
    return getattr(importlib.import_module(_WHERE[name]), name)
