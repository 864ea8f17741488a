"""A throw-away HAProxy in front of server replicas: round robin, no affinity, WebSockets."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.support.processes import ManagedProcess, ProcessFactory, free_port

CONFIG = """\
global
    maxconn 4096
defaults
    mode http
    timeout connect 2s
    timeout client 60s
    timeout server 60s
    timeout tunnel 1h
frontend relaydesk
    bind 127.0.0.1:{port}
    default_backend replicas
backend replicas
    balance roundrobin
    option redispatch
    retries 2
{servers}
"""


def start_haproxy(
    factory: ProcessFactory, root: Path, backends: list[int]
) -> tuple[ManagedProcess, int]:
    """HAProxy on a free loopback port, balancing over ``backends`` (ports); fails without it."""
    binary = shutil.which("haproxy")
    if binary is None:
        raise RuntimeError("haproxy not found; scripts/install installs it")
    port = free_port()
    servers = "\n".join(
        f"    server r{i} 127.0.0.1:{p} check inter 500 fall 2 rise 1"
        for i, p in enumerate(backends)
    )
    config = root / "haproxy.cfg"
    config.write_text(CONFIG.format(port=port, servers=servers))
    process = factory([binary, "-db", "-f", str(config)], name="haproxy")
    process.wait_for_port(port, 10)
    return process, port
