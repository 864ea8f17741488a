"""Server settings, read once from ``RELAYDESK_*`` environment variables."""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path


def _env(name: str, default: str) -> str:
    return os.environ.get(f"RELAYDESK_{name}", default)


def _env_int(name: str, default: int) -> int:
    return int(_env(name, str(default)))


def _env_float(name: str, default: float) -> float:
    return float(_env(name, str(default)))


def _env_bool(name: str, default: bool) -> bool:
    return _env(name, "1" if default else "0").strip().lower() in {"1", "true", "yes", "on"}


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
    login_max_failures: int = 5
    login_window_s: int = 300
    heartbeat_s: float = 10.0
    liveness_timeout_s: float = 30.0
    presence_interval_s: float = 10.0
    max_text_frame: int = 16 * 1024 * 1024
    max_channel_frame: int = 1024 * 1024
    request_timeout_s: float = 30.0
    migrate_on_start: bool = True
    viewer_token_ttl_s: int = 3600
    max_body_bytes: int = 1024 * 1024
    audit_retention_days: int = 90
    history_retention_days: int = 30
    screen_revision_ttl_s: int = 300
    screen_revision_memory_bytes: int = 256 * 1024 * 1024

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
            login_max_failures=_env_int("LOGIN_MAX_FAILURES", 5),
            login_window_s=_env_int("LOGIN_WINDOW_S", 300),
            heartbeat_s=_env_float("HEARTBEAT_S", 10.0),
            liveness_timeout_s=_env_float("LIVENESS_TIMEOUT_S", 30.0),
            presence_interval_s=_env_float("PRESENCE_INTERVAL_S", 10.0),
            max_text_frame=_env_int("MAX_TEXT_FRAME", 16 * 1024 * 1024),
            max_channel_frame=_env_int("MAX_CHANNEL_FRAME", 1024 * 1024),
            request_timeout_s=_env_float("REQUEST_TIMEOUT_S", 30.0),
            migrate_on_start=_env_bool("MIGRATE_ON_START", True),
            viewer_token_ttl_s=_env_int("VIEWER_TOKEN_TTL_S", 3600),
            max_body_bytes=_env_int("MAX_BODY_BYTES", 1024 * 1024),
            audit_retention_days=_env_int("AUDIT_RETENTION_DAYS", 90),
            history_retention_days=_env_int("HISTORY_RETENTION_DAYS", 30),
            screen_revision_ttl_s=_env_int("SCREEN_REVISION_TTL_S", 300),
            screen_revision_memory_bytes=_env_int(
                "SCREEN_REVISION_MEMORY_BYTES", 256 * 1024 * 1024
            ),
        )


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
