"""Configuration of the relay's virtual desktops, in one place, read once from the environment."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wire.errors import InvalidArgs

# Chosen by benchmarks/bench_x11vnc_flags.py (numbers in docs/desktops.md): x11vnc's defaults
# batch updates for ~20 ms and nap when nobody types; these answer a 1x1 change in ~7 ms for
# ~3 % of a core per watched idle desktop (-wait 1 halves the latency but doubles that).
LOW_LATENCY_X11VNC_FLAGS: tuple[str, ...] = ("-wait", "2", "-defer", "2", "-nonap")
# What the Anthropic computer-use demo and E2B desktops run; the benchmark baseline.
BASELINE_X11VNC_FLAGS: tuple[str, ...] = ("-wait", "50")

DEFAULT_NOVNC_DIR = Path("/usr/share/novnc")
DEFAULT_APPS: tuple[str, ...] = ("xterm",)


def _default_state_dir() -> Path:
    # A relay process passes its own (``relay.config.RelaySettings``, from RELAYDESK_DATA_DIR).
    return Path.home() / ".local" / "share" / "relaydesk" / "relay"


@dataclass(frozen=True)
class DesktopSettings:
    """Limits, paths and binaries of virtual desktops on one relay."""

    max_desktops: int = 4
    watchdog_interval_s: float = 2.0
    novnc_dir: Path = DEFAULT_NOVNC_DIR
    state_dir: Path = field(default_factory=_default_state_dir)
    apps: tuple[str, ...] = DEFAULT_APPS
    # Command lines a start may ask for besides ``apps`` (operator's choice, never the wire's).
    allowed_apps: tuple[str, ...] = ()
    x11vnc_flags: tuple[str, ...] = LOW_LATENCY_X11VNC_FLAGS
    window_manager: tuple[str, ...] = ("openbox", "--sm-disable")
    start_timeout_s: float = 15.0
    probe_timeout_s: float = 3.0
    # Watchdog rounds in a row whose chain probe fails before a desktop whose essential
    # processes are alive is failed (a dead essential process fails it at once). Four rounds
    # (~32 s with the defaults) outlast x11vnc's 20 s wait on a viewer that stopped reading
    # (docs/desktops.md, "Watchdog").
    probe_failures: int = 4
    stop_grace_s: float = 3.0
    # A desktop whose relay has not beaten its heartbeat this long stops by itself (0: never).
    orphan_timeout_s: float = 600.0
    xvfb_binary: str = "Xvfb"
    x11vnc_binary: str = "x11vnc"
    dbus_binary: str = "dbus-daemon"
    clipboard_binary: str = "autocutsel"
    # What a start that names no profile gets (relay/desktops/profiles.py).
    default_profile: str = "standard"
    # Operator's profiles, besides (or replacing) the built-in ones.
    profiles_dir: Path | None = None
    # Who desktops run as when the relay is root (relay/desktops/leases.py): this account,
    # held by this relay alone, or (empty) one of ``desktop_user_pool`` pool accounts.
    desktop_user: str = ""
    desktop_user_pool: int = 64
    homes_dir: Path | None = None
    # A home larger than this refuses to start (kept homes) or stops its desktop (checked every
    # ``home_check_interval_s`` while it runs).
    home_max_mb: int = 2048
    home_check_interval_s: float = 10.0
    # Ready desktops kept per profile (RELAYDESK_POOL, parsed by the relay's settings:
    # relay/desktops/pool.py), and how many of them start at once.
    pool: tuple[tuple[str, int], ...] = ()
    pool_concurrency: int = 1
    # A desktop whose home is larger than this is refused a snapshot (docs/desktops.md,
    # "Snapshots and forks").
    snapshot_max_mb: int = 1024
    # A running desktop nobody has used this long (no viewer, no action through the relay,
    # not recorded) is paused (relay/desktops/idle.py; docs/desktops.md, "Idle pause"); 0: never.
    idle_pause_s: float = 0.0

    @property
    def state_file(self) -> Path:
        return self.state_dir / "desktops.json"

    @property
    def heartbeat_file(self) -> Path:
        """Touched by the live relay; each desktop's orphan guard watches its age."""
        return self.state_dir / "heartbeat"

    @property
    def log_dir(self) -> Path:
        return self.state_dir / "desktop-logs"

    @property
    def run_dir(self) -> Path:
        """Private files of live desktops: one 0700 directory each, and the relay's
        authority file (relay/desktops/credentials.py)."""
        return self.state_dir / "run"

    @property
    def authority_file(self) -> Path:
        return self.run_dir / "Xauthority"

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, **overrides: Any
    ) -> DesktopSettings:
        """Build a config from ``RELAYDESK_*`` variables; ``overrides`` win over both."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for var, (name, parse) in _ENV_FIELDS.items():
            raw = env.get(var)
            if raw is not None and raw.strip():
                values[name] = _parse(var, raw.strip(), parse)
        values.update(overrides)
        return cls(**values)


def _parse(var: str, raw: str, parse: Callable[[str], Any]) -> Any:
    try:
        return parse(raw)
    except ValueError as err:
        raise InvalidArgs(var, f"cannot parse {raw!r}") from err


def _positive_int(raw: str) -> int:
    value = int(raw)
    if value < 1:
        raise ValueError(raw)
    return value


def _positive_float(raw: str) -> float:
    value = float(raw)
    if value <= 0:
        raise ValueError(raw)
    return value


def _non_negative_float(raw: str) -> float:
    value = float(raw)
    if not value >= 0 or value == float("inf"):
        raise ValueError(raw)
    return value


def _comma_list(raw: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in raw.split(",") if item.strip())


def _word_list(raw: str) -> tuple[str, ...]:
    return tuple(raw.split())


_ENV_FIELDS: dict[str, tuple[str, Callable[[str], Any]]] = {
    "RELAYDESK_MAX_DESKTOPS": ("max_desktops", _positive_int),
    "RELAYDESK_WATCHDOG_INTERVAL_S": ("watchdog_interval_s", _positive_float),
    "RELAYDESK_NOVNC_DIR": ("novnc_dir", Path),
    "RELAYDESK_STATE_DIR": ("state_dir", Path),
    "RELAYDESK_DESKTOP_APPS": ("apps", _comma_list),
    "RELAYDESK_DESKTOP_ALLOWED_APPS": ("allowed_apps", _comma_list),
    "RELAYDESK_X11VNC_FLAGS": ("x11vnc_flags", _word_list),
    "RELAYDESK_WINDOW_MANAGER": ("window_manager", _word_list),
    "RELAYDESK_DESKTOP_START_TIMEOUT_S": ("start_timeout_s", _positive_float),
    "RELAYDESK_DESKTOP_PROBE_TIMEOUT_S": ("probe_timeout_s", _positive_float),
    "RELAYDESK_DESKTOP_PROBE_FAILURES": ("probe_failures", _positive_int),
    "RELAYDESK_ORPHAN_TIMEOUT_S": ("orphan_timeout_s", _non_negative_float),
    "RELAYDESK_XVFB_BINARY": ("xvfb_binary", str),
    "RELAYDESK_X11VNC_BINARY": ("x11vnc_binary", str),
    "RELAYDESK_DESKTOP_PROFILE": ("default_profile", str),
    "RELAYDESK_DESKTOP_PROFILES_DIR": ("profiles_dir", Path),
    "RELAYDESK_DESKTOP_USER": ("desktop_user", str),
    "RELAYDESK_DESKTOP_HOMES_DIR": ("homes_dir", Path),
    "RELAYDESK_DESKTOP_HOME_MAX_MB": ("home_max_mb", _positive_int),
    "RELAYDESK_SNAPSHOT_MAX_MB": ("snapshot_max_mb", _positive_int),
    "RELAYDESK_DESKTOP_USER_POOL": ("desktop_user_pool", _positive_int),
    "RELAYDESK_DESKTOP_HOME_CHECK_S": ("home_check_interval_s", _positive_float),
    "RELAYDESK_POOL_CONCURRENCY": ("pool_concurrency", _positive_int),
    "RELAYDESK_IDLE_PAUSE_S": ("idle_pause_s", _non_negative_float),
}
