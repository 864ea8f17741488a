"""Relay settings: command-line flags over ``RELAYDESK_*`` environment variables.

:meth:`RelaySettings.from_env` is the one place a relay process reads its environment; the
settings object it returns is passed down to every part (worker, handlers, desktops, audio,
host-helper client).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final
from urllib.parse import urlsplit

from relay.a11y.settings import A11ySettings
from relay.desktop_tools.settings import DesktopToolsConfigError, DesktopToolSettings
from relay.desktops.audio import AudioSettings
from relay.desktops.config import DesktopSettings
from relay.desktops.docker.config import DockerDesktopSettings
from relay.desktops.leases import relay_key, taken_by_another
from relay.desktops.pool import SETTING as POOL_SETTING
from relay.desktops.pool import parse_pool
from relay.desktops.profiles import load_profiles
from wire.errors import InvalidArgs, RelaydeskError

log = logging.getLogger(__name__)

SERVER_URL_ENV: Final = "RELAYDESK_SERVER_URL"
HOST_HELPER_ENV: Final = "RELAYDESK_HOST_HELPER"
HOST_HELPER_TOKEN_ENV: Final = "RELAYDESK_HOST_HELPER_TOKEN"  # noqa: S105 - a variable's name
# Set by ``relaydesk up`` for a relay beside its server: the host ``vnc.direct`` answers with.
DIRECT_HOST_ENV: Final = "RELAYDESK_DIRECT_VNC_HOST"
BITRATE_ENV: Final = "RELAYDESK_AUDIO_BITRATE"
DEFAULT_BITRATE: Final = 96_000  # Opus, bits per second

SERVER_URL_SCHEMES = ("http", "https", "ws", "wss")


class RelayConfigError(RelaydeskError):
    """The relay cannot work as configured (token, server URL): it says so once and exits
    instead of retrying, since waiting does not fix a configuration."""


def _env(name: str, default: str, environ: Mapping[str, str] | None = None) -> str:
    return (os.environ if environ is None else environ).get(f"RELAYDESK_{name}", default)


@dataclass(frozen=True)
class RelaySettings:
    """Everything a relay process is configured with, read once (:meth:`from_env`)."""

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
    host_helper_token: str = field(default="", repr=False)
    # The host ``vnc.direct`` names (a co-located server); None: the relay does not offer it.
    direct_vnc_host: str | None = None
    audio_bitrate: int = DEFAULT_BITRATE
    desktops: DesktopSettings = field(default_factory=DesktopSettings)
    audio: AudioSettings = field(default_factory=AudioSettings)
    a11y: A11ySettings = field(default_factory=A11ySettings)
    # Shell and file commands in desktops (RELAYDESK_CUA_SHELL; docs/desktop-tools.md).
    tools: DesktopToolSettings = field(default_factory=DesktopToolSettings)
    # Desktops in containers (RELAYDESK_DOCKER_DESKTOP*; docs/docker.md).
    docker: DockerDesktopSettings = field(default_factory=DockerDesktopSettings)

    @classmethod
    def from_env(
        cls,
        server_url: str | None,
        token_file: str | None,
        *,
        stop_desktops_on_exit: bool = False,
        environ: Mapping[str, str] | None = None,
    ) -> RelaySettings:
        """Flags over ``RELAYDESK_*`` variables; :class:`RelayConfigError` for a configuration
        that cannot work (no server URL, no token, a file that cannot be read)."""
        env = os.environ if environ is None else environ
        url = server_url or env.get(SERVER_URL_ENV, "")
        if not url:
            raise RelayConfigError(f"--server (or {SERVER_URL_ENV}) is required")
        token, source = read_token_and_source(token_file, env)
        if not token:
            where = source or "--token-file, RELAYDESK_RELAY_TOKEN or RELAYDESK_RELAY_TOKEN_FILE"
            raise RelayConfigError(f"no relay token in {where}")
        state_dir = default_state_dir(env)
        return cls(
            server_url=check_server_url(url),
            token=token,
            token_source=source,
            state_dir=state_dir,
            liveness_timeout_s=env_float("LIVENESS_TIMEOUT_S", 30.0, env),
            backoff_max_s=env_float("RELAY_BACKOFF_MAX_S", 10.0, env),
            stop_desktops_on_exit=stop_desktops_on_exit,
            host_helper_url=env.get(HOST_HELPER_ENV, ""),
            host_helper_token=env.get(HOST_HELPER_TOKEN_ENV, "").strip(),
            direct_vnc_host=env.get(DIRECT_HOST_ENV) or None,
            audio_bitrate=parse_bitrate(env.get(BITRATE_ENV, "")),
            desktops=_desktop_config(env, state_dir),
            audio=AudioSettings.from_env(env),
            a11y=A11ySettings.from_env(env),
            tools=_tool_settings(env),
            docker=DockerDesktopSettings.from_env(env),
        )

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


def default_state_dir(environ: Mapping[str, str] | None = None) -> Path:
    home_data = str(Path.home() / ".local" / "share" / "relaydesk")
    data_dir = Path(_env("DATA_DIR", home_data, environ))
    return Path(_env("STATE_DIR", str(data_dir / "relay"), environ))


def read_token(token_file: str | None) -> str:
    """The relay token: ``--token-file`` wins, then ``RELAYDESK_RELAY_TOKEN``, then the file
    named by ``RELAYDESK_RELAY_TOKEN_FILE`` (a container secret, for example)."""
    return read_token_and_source(token_file)[0]


def read_token_and_source(
    token_file: str | None, environ: Mapping[str, str] | None = None
) -> tuple[str, str]:
    """The relay token and where it came from (a file that cannot be read is a
    :class:`RelayConfigError`)."""
    if token_file:
        return _read_token_file(token_file, "--token-file"), f"the token file {token_file}"
    token = _env("RELAY_TOKEN", "", environ).strip()
    if token:
        return token, "RELAYDESK_RELAY_TOKEN"
    env_file = _env("RELAY_TOKEN_FILE", "", environ)
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


def _desktop_config(environ: Mapping[str, str], state_dir: Path) -> DesktopSettings:
    """The desktops' settings; a named desktop user another relay holds is refused here, so
    the relay says so and exits (relay/desktops/leases.py)."""
    try:
        config = DesktopSettings.from_env(environ, state_dir=state_dir)
    except InvalidArgs as err:
        raise RelayConfigError(err.message) from None
    config = dataclasses.replace(config, pool=_pool(environ.get(POOL_SETTING, ""), config))
    name = config.desktop_user
    if name and os.geteuid() == 0 and taken_by_another(name, relay_key(state_dir)):
        raise RelayConfigError(
            f"the desktop user {name!r} (RELAYDESK_DESKTOP_USER) is in use by another relay "
            "on this host; give each relay its own, or none to take one from the pool"
        )
    return config


def _pool(raw: str, config: DesktopSettings) -> tuple[tuple[str, int], ...]:
    """``RELAYDESK_POOL`` checked against the relay's profiles (relay/desktops/pool.py)."""
    try:
        sizes = parse_pool(raw, load_profiles(config.profiles_dir))
    except ValueError as err:
        raise RelayConfigError(f"{POOL_SETTING}={raw.strip()!r}: {err}") from None
    return tuple(sizes.items())


def _tool_settings(environ: Mapping[str, str]) -> DesktopToolSettings:
    try:
        return DesktopToolSettings.from_env(environ)
    except DesktopToolsConfigError as err:
        raise RelayConfigError(err.message) from None


def env_float(name: str, default: float, environ: Mapping[str, str] | None = None) -> float:
    raw = _env(name, str(default), environ)
    try:
        return float(raw)
    except ValueError:
        raise RelayConfigError(f"RELAYDESK_{name}={raw!r} is not a number") from None


def parse_bitrate(raw: str) -> int:
    """A ``RELAYDESK_AUDIO_BITRATE`` value, clamped to what Opus encodes; the default when it
    is empty or not a number."""
    raw = raw.strip()
    if not raw:
        return DEFAULT_BITRATE
    try:
        value = int(raw)
    except ValueError:
        log.warning("%s=%r is not a number; using %d", BITRATE_ENV, raw, DEFAULT_BITRATE)
        return DEFAULT_BITRATE
    return min(max(value, 6_000), 510_000)
