"""Settings of the relay's container desktops (``kind: docker``), read once from the environment.

The rest of a docker desktop's configuration is the relay's desktop configuration
(``DesktopSettings``: window manager, apps, x11vnc flags, watchdog, orphan timeout, desktop user).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from wire.errors import InvalidArgs

ENABLED_ENV: Final = "RELAYDESK_DOCKER_DESKTOPS"
IMAGE_ENV: Final = "RELAYDESK_DOCKER_DESKTOP_IMAGE"
CPUS_ENV: Final = "RELAYDESK_DOCKER_DESKTOP_CPUS"
MEMORY_ENV: Final = "RELAYDESK_DOCKER_DESKTOP_MEMORY"
NETWORK_ENV: Final = "RELAYDESK_DOCKER_DESKTOP_NETWORK"
DIR_ENV: Final = "RELAYDESK_DOCKER_DESKTOP_DIR"
START_TIMEOUT_ENV: Final = "RELAYDESK_DOCKER_DESKTOP_START_TIMEOUT_S"
DOCKER_HOST_ENV: Final = "DOCKER_HOST"

DEFAULT_IMAGE: Final = "relaydesk/desktop:dev"
DEFAULT_SOCKET: Final = Path("/var/run/docker.sock")
# A root relay's desktop directories: its desktop user must traverse their parents (0711) to
# reach a desktop's session bus (the accessibility worker runs as that user).
ROOT_DIR: Final = Path("/var/lib/relaydesk/docker")
NO_NETWORK: Final = "none"
# Networks that would give a desktop the host's network namespace or another container's.
_REFUSED_NETWORKS: Final = ("host",)
_REFUSED_PREFIXES: Final = ("container:",)
_MEMORY_RE: Final = re.compile(r"^([0-9]+)([kmg]?)b?$", re.IGNORECASE)
_UNITS: Final = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}
MIN_MEMORY: Final = 64 * 1024**2


@dataclass(frozen=True)
class DockerDesktopSettings:
    """Whether and how the relay runs desktops in containers."""

    enabled: bool = True
    image: str = DEFAULT_IMAGE
    cpus: float = 1.0
    memory_bytes: int = 1024**3
    network: str = NO_NETWORK
    # None: DOCKER_HOST names a daemon that is not behind a unix socket (not supported).
    socket: Path | None = DEFAULT_SOCKET
    # Parent of the desktops' directories (None: beside the relay's state, or ROOT_DIR).
    directory: Path | None = None
    pids_limit: int = 512
    # Creating a container takes seconds on a loaded host: longer than a virtual desktop's.
    start_timeout_s: float = 30.0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> DockerDesktopSettings:
        """Read ``RELAYDESK_DOCKER_DESKTOP*`` and ``DOCKER_HOST``; ``InvalidArgs`` names a bad
        variable."""
        env = os.environ if environ is None else environ
        value = {name: raw.strip() for name, raw in env.items() if raw.strip()}
        enabled = value.get(ENABLED_ENV, "auto").lower()
        if enabled not in ("auto", "off"):
            raise InvalidArgs(ENABLED_ENV, "must be auto or off")
        return cls(
            enabled=enabled == "auto",
            image=value.get(IMAGE_ENV, DEFAULT_IMAGE),
            cpus=_cpus(value.get(CPUS_ENV, "1")),
            memory_bytes=parse_memory(value.get(MEMORY_ENV, "1g")),
            network=check_network(value.get(NETWORK_ENV, NO_NETWORK)),
            socket=_docker_socket(value.get(DOCKER_HOST_ENV)),
            directory=Path(value[DIR_ENV]) if DIR_ENV in value else None,
            start_timeout_s=_positive(START_TIMEOUT_ENV, value.get(START_TIMEOUT_ENV, "30")),
        )

    def root(self, state_dir: Path, root_relay: bool) -> Path:
        """Where this relay's desktop directories live (one per relay state directory)."""
        if self.directory is not None:
            return self.directory / relay_key(state_dir)
        return ROOT_DIR / relay_key(state_dir) if root_relay else state_dir / "docker"


def relay_key(state_dir: Path) -> str:
    """A short name of one relay (its state directory): its containers carry it as a label,
    so relays sharing a host and a Docker daemon never touch each other's desktops."""
    return hashlib.sha256(str(state_dir.resolve()).encode()).hexdigest()[:12]


def parse_memory(raw: str) -> int:
    """``512m``, ``2g``, ``1073741824`` → bytes (at least 64 MiB)."""
    match = _MEMORY_RE.fullmatch(raw.strip())
    if match is None:
        raise InvalidArgs(MEMORY_ENV, f"cannot parse {raw!r}; e.g. 512m or 2g")
    size = int(match[1]) * _UNITS[match[2].lower()]
    if size < MIN_MEMORY:
        raise InvalidArgs(MEMORY_ENV, "a desktop needs at least 64m")
    return size


def check_network(name: str) -> str:
    """A Docker network a desktop may join: ``none`` (the default) or a named network."""
    if name in _REFUSED_NETWORKS or name.startswith(_REFUSED_PREFIXES):
        raise InvalidArgs(
            NETWORK_ENV,
            f"{name!r} would share a network namespace; use none, bridge or a network of your own",
        )
    return name


def _cpus(raw: str) -> float:
    value = _positive(CPUS_ENV, raw)
    if value > 1024:
        raise InvalidArgs(CPUS_ENV, f"{raw!r} is not a number of CPUs")
    return value


def _positive(name: str, raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise InvalidArgs(name, f"cannot parse {raw!r}") from None
    if not 0 < value < float("inf"):
        raise InvalidArgs(name, "must be a positive number")
    return value


def _docker_socket(docker_host: str | None) -> Path | None:
    """The daemon's socket: ``DOCKER_HOST`` when it names a unix socket, the default without
    it, None for another address (the relay then runs no docker desktops and says why)."""
    if docker_host is None:
        return DEFAULT_SOCKET
    if not docker_host.startswith("unix://"):
        return None
    return Path(docker_host.removeprefix("unix://"))
