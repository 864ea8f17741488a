"""Server settings, read once from ``RELAYDESK_*`` environment variables."""

from __future__ import annotations

import os
import secrets
import socket
from dataclasses import dataclass, field
from pathlib import Path


class ConfigError(ValueError):
    """A server configuration that cannot work; the message says what to set."""


def _env(name: str, default: str) -> str:
    return os.environ.get(f"RELAYDESK_{name}", default)


def _env_int(name: str, default: int) -> int:
    return int(_env(name, str(default)))


def _env_float(name: str, default: float) -> float:
    return float(_env(name, str(default)))


def _env_list(name: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in _env(name, "").split(",") if item.strip())


def _env_bool(name: str, default: bool) -> bool:
    return _env(name, "1" if default else "0").strip().lower() in {"1", "true", "yes", "on"}


def recordings_path(settings: Settings) -> Path:
    """Where recordings are kept: ``RELAYDESK_RECORDINGS_DIR``, else under the data dir."""
    return (
        Path(settings.recordings_dir)
        if settings.recordings_dir
        else settings.data_dir / "recordings"
    )


def default_data_dir() -> Path:
    return Path(_env("DATA_DIR", str(Path.home() / ".local" / "share" / "relaydesk")))


@dataclass(frozen=True)
class Settings:
    """Everything the server process is configured with."""

    data_dir: Path = field(default_factory=default_data_dir)
    database_url: str = ""
    redis_url: str = ""
    host: str = "127.0.0.1"
    port: int = 8400
    public_url: str = ""
    # Host names besides the public URL's, loopback names and IP addresses (internal names).
    allowed_hosts: tuple[str, ...] = ()
    secret_key: str = ""
    cookie_secure: bool = False
    session_ttl_s: int = 7 * 24 * 3600
    session_purge_interval_s: float = 3600.0
    login_link_ttl_s: int = 900
    # Failed logins one client address may make within the window (never counted per user).
    login_max_failures: int = 20
    login_window_s: int = 300
    # Reverse proxies (addresses or networks) whose X-Forwarded-For names the client; none by
    # default, loopback included (server.auth.addresses).
    trusted_proxies: tuple[str, ...] = ()
    heartbeat_s: float = 10.0
    liveness_timeout_s: float = 30.0
    presence_interval_s: float = 10.0
    max_text_frame: int = 16 * 1024 * 1024
    max_channel_frame: int = 1024 * 1024
    # At most this many live desktops of one relay in the inventory; what a relay reports
    # beyond is dropped with a logged reason (docs/protocol.md).
    max_desktops_per_relay: int = 64
    request_timeout_s: float = 30.0
    migrate_on_start: bool = True
    viewer_token_ttl_s: int = 3600
    max_body_bytes: int = 1024 * 1024
    audit_retention_days: int = 90
    history_retention_days: int = 30
    # Recordings (docs/recording.md): where segments are kept (empty: ``<data dir>/recordings``;
    # replicas share one volume) and for how long.
    recordings_dir: str = ""
    recording_retention_days: int = 30
    screen_revision_ttl_s: int = 300
    screen_revision_memory_bytes: int = 256 * 1024 * 1024
    # Several replicas (``redis_url`` set): the shared secret of their internal channel, the
    # address the others reach this one at (default: derived from host and port), and how
    # often a replica says it is alive (it is dead after ``cluster_dead_after_s`` of silence).
    cluster_secret: str = ""
    internal_url: str = ""
    cluster_heartbeat_s: float = 1.0
    cluster_dead_after_s: float = 5.0
    # People stay in charge (docs/control.md): a person's input holds a desktop this long; a
    # stopped agent gets no new grant for the cooldown; grants' budget and idle expiry, with
    # per-relay overrides (JSON: {"relay name": {"budget": N, "idle_s": S}}).
    takeover_idle_s: float = 5.0
    agent_regrant_cooldown_s: float = 30.0
    agent_grant_budget: int = 1000
    agent_grant_idle_s: float = 120.0
    agent_grant_relays: str = ""
    # ``GET /metrics`` for holders of this bearer token, from anywhere; empty: metrics off.
    metrics_token: str = field(default="", repr=False)
    # Open streams and sockets one user, or one client address, may hold on this process (0:
    # no cap); how long a client may take to send a request's head, and how many connections
    # from one address may be sending one at once (server/boundary/limits.py, http_protocol.py).
    max_streams_per_principal: int = 64
    max_streams_per_address: int = 256
    header_timeout_s: float = 10.0
    max_pending_requests_per_address: int = 256

    @property
    def clustered(self) -> bool:
        """Several replicas share Redis (ownership, forwarding); else one process serves all."""
        return bool(self.redis_url)

    def advertised_url(self) -> str:
        """Where the other replicas reach this one (``internal_url`` or host:port)."""
        if self.internal_url:
            return self.internal_url.rstrip("/")
        host = _own_address() if self.host in {"", "0.0.0.0", "::"} else self.host
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}"

    def public_base_url(self) -> str:
        """Where people and agents reach this server: ``RELAYDESK_PUBLIC_URL``, else the address
        it listens on; "" when neither says (a wildcard address names no host to reach)."""
        if self.public_url:
            return self.public_url.rstrip("/")
        if self.host in {"", "0.0.0.0", "::"}:
            return ""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def check(self) -> None:
        """Refuse a configuration that cannot work, with a message an operator can act on."""
        if self.clustered and len(self.cluster_secret) < 16:
            raise ConfigError(
                "RELAYDESK_REDIS_URL is set but RELAYDESK_CLUSTER_SECRET is missing or shorter "
                "than 16 characters: replicas authenticate each other with it; set the same "
                "secret on every replica"
            )
        if self.metrics_token and len(self.metrics_token) < 16:
            raise ConfigError(
                "RELAYDESK_METRICS_TOKEN is shorter than 16 characters: it lets anyone who holds "
                "it read the metrics from anywhere; use a long random value, or leave it unset "
                "to turn the metrics off"
            )

    @classmethod
    def from_env(cls) -> Settings:
        data_dir = default_data_dir()
        return cls(
            data_dir=data_dir,
            database_url=database_url_from_env(data_dir),
            redis_url=_env("REDIS_URL", ""),
            host=_env("HOST", "127.0.0.1"),
            port=_env_int("PORT", 8400),
            public_url=_env("PUBLIC_URL", ""),
            allowed_hosts=tuple(h for h in _env("ALLOWED_HOSTS", "").split(",") if h.strip()),
            secret_key=_env("SECRET_KEY", "") or load_or_create_secret(data_dir),
            cookie_secure=_env_bool("COOKIE_SECURE", False),
            session_ttl_s=_env_int("SESSION_TTL_S", 7 * 24 * 3600),
            session_purge_interval_s=_env_float("SESSION_PURGE_INTERVAL_S", 3600.0),
            login_link_ttl_s=_env_int("LOGIN_LINK_TTL_S", 900),
            login_max_failures=_env_int("LOGIN_MAX_FAILURES", 20),
            login_window_s=_env_int("LOGIN_WINDOW_S", 300),
            heartbeat_s=_env_float("HEARTBEAT_S", 10.0),
            liveness_timeout_s=_env_float("LIVENESS_TIMEOUT_S", 30.0),
            presence_interval_s=_env_float("PRESENCE_INTERVAL_S", 10.0),
            max_text_frame=_env_int("MAX_TEXT_FRAME", 16 * 1024 * 1024),
            max_channel_frame=_env_int("MAX_CHANNEL_FRAME", 1024 * 1024),
            max_desktops_per_relay=_env_int("MAX_DESKTOPS_PER_RELAY", 64),
            request_timeout_s=_env_float("REQUEST_TIMEOUT_S", 30.0),
            migrate_on_start=_env_bool("MIGRATE_ON_START", True),
            viewer_token_ttl_s=_env_int("VIEWER_TOKEN_TTL_S", 3600),
            max_body_bytes=_env_int("MAX_BODY_BYTES", 1024 * 1024),
            audit_retention_days=_env_int("AUDIT_RETENTION_DAYS", 90),
            history_retention_days=_env_int("HISTORY_RETENTION_DAYS", 30),
            recordings_dir=_env("RECORDINGS_DIR", ""),
            recording_retention_days=_env_int("RECORDING_RETENTION_DAYS", 30),
            screen_revision_ttl_s=_env_int("SCREEN_REVISION_TTL_S", 300),
            screen_revision_memory_bytes=_env_int(
                "SCREEN_REVISION_MEMORY_BYTES", 256 * 1024 * 1024
            ),
            cluster_secret=_env("CLUSTER_SECRET", ""),
            internal_url=_env("INTERNAL_URL", ""),
            cluster_heartbeat_s=_env_float("CLUSTER_HEARTBEAT_S", 1.0),
            cluster_dead_after_s=_env_float("CLUSTER_DEAD_AFTER_S", 5.0),
            takeover_idle_s=_env_float("TAKEOVER_IDLE_S", 5.0),
            agent_regrant_cooldown_s=_env_float("AGENT_REGRANT_COOLDOWN_S", 30.0),
            agent_grant_budget=_env_int("AGENT_GRANT_BUDGET", 1000),
            agent_grant_idle_s=_env_float("AGENT_GRANT_IDLE_S", 120.0),
            agent_grant_relays=_env("AGENT_GRANT_RELAYS", ""),
            metrics_token=_env("METRICS_TOKEN", ""),
            trusted_proxies=_env_list("TRUSTED_PROXIES"),
            max_streams_per_principal=_env_int("MAX_STREAMS_PER_PRINCIPAL", 64),
            max_streams_per_address=_env_int("MAX_STREAMS_PER_ADDRESS", 256),
            header_timeout_s=_env_float("HEADER_TIMEOUT_S", 10.0),
            max_pending_requests_per_address=_env_int("MAX_PENDING_REQUESTS_PER_ADDRESS", 256),
        )


def _own_address() -> str:
    """This host's address on its default route (a wildcard bind is reachable there)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1: selects a route, sends nothing
            return str(probe.getsockname()[0])
        except OSError:
            return "127.0.0.1"


def database_url_from_env(data_dir: Path | None = None) -> str:
    """``RELAYDESK_DATABASE_URL``, else the SQLite database in the data directory."""
    data_dir = data_dir or default_data_dir()
    return _env("DATABASE_URL", f"sqlite+aiosqlite:///{data_dir / 'relaydesk.db'}")


def load_or_create_secret(data_dir: Path) -> str:
    """Return the server's signing key, creating it (mode 0600) on first use."""
    path = data_dir / "secret_key"
    if path.exists():
        return path.read_text().strip()
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = secrets.token_urlsafe(48)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(key)
    return key
