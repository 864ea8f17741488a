"""Structured logging for every relaydesk process: one line per event, text or JSON."""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import time
from typing import Any

_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "color_message"}

# Defence in depth: capability paths and secrets never reach a log line, whoever logs them
# and at whatever level (uvicorn's "WebSocket /vnc/<sid>/<token>/websockify" line, the
# websockets library's DEBUG dump of request headers). Every relaydesk secret starts with
# ``rd<letter>_`` (API ``rdk_``, relay ``rdr_``, login link ``rdl_``, web session ``rds_``): one
# rule covers them all, and so any prefix added later.
_SECRET_HEADERS = r"(?:cookie|set-cookie|authorization|proxy-authorization|x-csrf-token)"  # noqa: S105
_SECRETS = (
    (re.compile(r"(/vnc/[^/\s\"']+/)[^/\s\"']+"), r"\1[redacted]"),
    (re.compile(r"(/login/)[^/\s\"']+"), r"\1[redacted]"),
    (re.compile(r"\b(rd[a-z]_)[A-Za-z0-9_-]+"), r"\1[redacted]"),
    (re.compile(r"(?i)(bearer\s+)[^\s\"']+"), r"\1[redacted]"),
    # "Cookie: …" lines and ('cookie', '…') / (b'cookie', b'…') header tuples.
    (re.compile(rf"(?im)^(\W*{_SECRET_HEADERS}\s*:\s*)\S.*$"), r"\1[redacted]"),
    (re.compile(rf"(?i)(b?['\"]{_SECRET_HEADERS}['\"],\s*b?['\"])[^'\"]*"), r"\1[redacted]"),
)


def redact(text: str) -> str:
    """``text`` with viewer tokens, login links, every ``rd?_`` secret and secret headers masked."""
    for pattern, replacement in _SECRETS:
        text = pattern.sub(replacement, text)
    return text


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}


def _timestamp(record: logging.LogRecord) -> str:
    millis = int(record.msecs)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{millis:03d}Z"


class JsonFormatter(logging.Formatter):
    """``{"ts", "level", "logger", "msg", …extra}`` per line."""

    def __init__(self, process: str) -> None:
        super().__init__()
        self.process = process

    def format(self, record: logging.LogRecord) -> str:
        body: dict[str, Any] = {
            "ts": _timestamp(record),
            "level": record.levelname.lower(),
            "process": self.process,
            "logger": record.name,
            "msg": redact(record.getMessage()),
            **_extras(record),
        }
        if record.exc_info:
            body["exc"] = self.formatException(record.exc_info)
        return redact(json.dumps(body, default=str))


class TextFormatter(logging.Formatter):
    """``ts level process logger: message key=value …`` per line."""

    def __init__(self, process: str) -> None:
        super().__init__()
        self.process = process

    def format(self, record: logging.LogRecord) -> str:
        extras = " ".join(f"{k}={v}" for k, v in _extras(record).items())
        line = (
            f"{_timestamp(record)} {record.levelname.lower():7} {self.process} "
            f"{record.name}: {redact(record.getMessage())}"
        )
        if extras:
            line = f"{line} {redact(extras)}"
        if record.exc_info:
            line = f"{line}\n{self.formatException(record.exc_info)}"
        return line


def configure(process: str, level: str | None = None, fmt: str | None = None) -> None:
    """Send every log record to stderr in the configured format."""
    level = (level or os.environ.get("RELAYDESK_LOG_LEVEL", "info")).upper()
    fmt = fmt or os.environ.get("RELAYDESK_LOG_FORMAT", "text")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(process) if fmt == "json" else TextFormatter(process))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in (
        "aiosqlite",
        "asyncio",
        "websockets",
        "uvicorn.access",
        "alembic.runtime",
        "httpx",
        "httpcore",
    ):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
