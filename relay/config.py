"""Relay settings: command-line flags over ``RELAYDESK_*`` environment variables."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


def _env(name: str, default: str) -> str:
    return os.environ.get(f"RELAYDESK_{name}", default)


@dataclass(frozen=True)
class RelayConfig:
    """How a relay reaches its server and how much work it takes at once."""

    server_url: str
    token: str
    state_dir: Path
    # The server pings every heartbeat; a server silent this long is dropped and redialled.
    liveness_timeout_s: float = 30.0
    max_concurrency: int = 64
    backoff_initial_s: float = 0.25
    backoff_max_s: float = 10.0
    max_text: int = 16 * 1024 * 1024
    max_frame: int = 1024 * 1024
    stop_desktops_on_exit: bool = False
    host_helper_url: str = ""

    @property
    def connect_url(self) -> str:
        base = self.server_url.rstrip("/")
        if base.startswith("https://"):
            base = "wss://" + base.removeprefix("https://")
        elif base.startswith("http://"):
            base = "ws://" + base.removeprefix("http://")
        return f"{base}/relay/v1/connect"


def default_state_dir() -> Path:
    data_dir = Path(_env("DATA_DIR", str(Path.home() / ".local" / "share" / "relaydesk")))
    return Path(_env("STATE_DIR", str(data_dir / "relay")))


def read_token(token_file: str | None) -> str:
    """The relay token: ``--token-file`` wins, then ``RELAYDESK_RELAY_TOKEN``."""
    if token_file:
        return Path(token_file).read_text().strip()
    return _env("RELAY_TOKEN", "").strip()


def env_float(name: str, default: float) -> float:
    return float(_env(name, str(default)))
