"""Relay settings: command-line flags over ``RELAYDESK_*`` environment variables."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from wire.errors import RelaydeskError

SERVER_URL_SCHEMES = ("http", "https", "ws", "wss")


class RelayConfigError(RelaydeskError):
    """The relay cannot work as configured (token, server URL): it says so once and exits
    instead of retrying, since waiting does not fix a configuration."""


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
    # Where the token came from, for messages about a refused token (never the token itself).
    token_source: str = "RELAYDESK_RELAY_TOKEN"  # noqa: S105 - a variable's name

    @property
    def connect_url(self) -> str:
        base = self.server_url.rstrip("/")
        if base.startswith("https://"):
            base = "wss://" + base.removeprefix("https://")
        elif base.startswith("http://"):
            base = "ws://" + base.removeprefix("http://")
        return f"{base}{CONNECT_PATH}"


CONNECT_PATH = "/relay/v1/connect"


def check_server_url(url: str) -> str:
    """``url`` if it names a server the relay can dial, else :class:`RelayConfigError`."""
    parts = urlsplit(url.strip())
    if parts.scheme not in SERVER_URL_SCHEMES or not parts.hostname:
        raise RelayConfigError(
            f"--server {url!r} is not a server URL: give its scheme and host, "
            "e.g. https://desk.example.org or http://127.0.0.1:8400"
        )
    if parts.path.rstrip("/").endswith(CONNECT_PATH):
        raise RelayConfigError(
            f"--server {url!r}: give the server's base URL; the relay adds {CONNECT_PATH} itself"
        )
    if parts.query or parts.fragment:
        raise RelayConfigError(f"--server {url!r}: a server URL has no query or fragment")
    return url.strip()


def default_state_dir() -> Path:
    data_dir = Path(_env("DATA_DIR", str(Path.home() / ".local" / "share" / "relaydesk")))
    return Path(_env("STATE_DIR", str(data_dir / "relay")))


def read_token(token_file: str | None) -> str:
    """The relay token: ``--token-file`` wins, then ``RELAYDESK_RELAY_TOKEN``, then the file
    named by ``RELAYDESK_RELAY_TOKEN_FILE`` (a container secret, for example)."""
    return read_token_and_source(token_file)[0]


def read_token_and_source(token_file: str | None) -> tuple[str, str]:
    """The relay token and where it came from (a file that cannot be read is a
    :class:`RelayConfigError`)."""
    if token_file:
        return _read_token_file(token_file, "--token-file"), f"the token file {token_file}"
    token = _env("RELAY_TOKEN", "").strip()
    if token:
        return token, "RELAYDESK_RELAY_TOKEN"
    env_file = _env("RELAY_TOKEN_FILE", "")
    if not env_file:
        return "", ""
    token = _read_token_file(env_file, "RELAYDESK_RELAY_TOKEN_FILE")
    return token, f"the token file {env_file} (RELAYDESK_RELAY_TOKEN_FILE)"


def _read_token_file(path: str, named_by: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        raise RelayConfigError(f"{named_by} {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as err:
        reason = err.strerror if isinstance(err, OSError) and err.strerror else "not readable"
        raise RelayConfigError(f"{named_by} {path}: {reason}") from None


def env_float(name: str, default: float) -> float:
    return float(_env(name, str(default)))
