"""Desktops on the relay: one lifecycle (slots, state file, events, adoption, orphan rules),
a launcher per kind (processes here, containers in ``docker/``).

See docs/desktops.md. The names below load on first use, so a small process that needs one
module (a desktop's orphan guard, ``relay/desktops/guard.py``) does not load the rest.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from relay.desktops.config import DesktopSettings
    from relay.desktops.launch import missing_binaries
    from relay.desktops.lifecycle import Desktops, OnChange
    from relay.desktops.processes import ProcessDesktops, ProcessLauncher, process_desktops

__all__ = [
    "DesktopSettings",
    "Desktops",
    "OnChange",
    "ProcessDesktops",
    "ProcessLauncher",
    "missing_binaries",
    "process_desktops",
]

_WHERE = {
    "DesktopSettings": "relay.desktops.config",
    "Desktops": "relay.desktops.lifecycle",
    "OnChange": "relay.desktops.lifecycle",
    "ProcessDesktops": "relay.desktops.processes",
    "ProcessLauncher": "relay.desktops.processes",
    "missing_binaries": "relay.desktops.launch",
    "process_desktops": "relay.desktops.processes",
}


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(name)
    return getattr(importlib.import_module(_WHERE[name]), name)
