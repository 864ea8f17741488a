"""The host helper's settings, read once (flags over ``RELAYDESK_*`` environment variables)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# The relay's virtual desktops use the same flags (docs/desktops.md has the measurements):
# answer a small change in ~7 ms instead of x11vnc's default ~20 ms batching and napping.
LOW_LATENCY_X11VNC_FLAGS: tuple[str, ...] = ("-wait", "2", "-defer", "2", "-nonap")
DEFAULT_NOVNC_DIR = Path("/usr/share/novnc")
TRUE_WORDS = frozenset({"1", "true", "yes", "on"})


@dataclass(frozen=True)
class HelperSettings:
    """What the helper shares, who may ask, and how long its children may take."""

    host: str
    port: int
    token: str
    display: str
    allow_remote_desktop: bool = False
    novnc_dir: Path = DEFAULT_NOVNC_DIR
    x11vnc_binary: str = "x11vnc"
    x11vnc_flags: tuple[str, ...] = LOW_LATENCY_X11VNC_FLAGS
    start_timeout_s: float = 15.0
    probe_timeout_s: float = 3.0
    stop_grace_s: float = 3.0
    watchdog_interval_s: float = 2.0
    input_backend: str = "xtest"
    # After one of the helper's own screen actions, XTEST input counts as the agent's for
    # this long (host_helper/input_watch.py).
    input_grace_s: float = 0.5


def env_flag(raw: str | None) -> bool:
    """``RELAYDESK_ALLOW_REMOTE_DESKTOP``-style switches: only explicit yes-words enable."""
    return (raw or "").strip().casefold() in TRUE_WORDS
