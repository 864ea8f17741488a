"""A throw-away HAProxy in front of server replicas: round robin, no affinity, WebSockets."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.support.processes import ManagedProcess, ProcessFactory, free_port

CONFIG = """\
global
    maxconn {maxconn}
defaults
    mode http
    maxconn {maxconn}
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
    factory: ProcessFactory, root: Path, backends: list[int], maxconn: int = 4096
) -> tuple[ManagedProcess, int]:
    """HAProxy on a free loopback port, balancing over ``backends`` (ports); fails without it.

    ``maxconn``: client connections at once (HAProxy raises its own file limit to match)."""
    binary = shutil.which("haproxy")
    if binary is None:
        raise RuntimeError("haproxy not found; scripts/install installs it")
    port = free_port()
    servers = "\n".join(
        f"    server r{i} 127.0.0.1:{p} check inter 500 fall 2 rise 1"
        for i, p in enumerate(backends)
    )
    config = root / "haproxy.cfg"
    config.write_text(CONFIG.format(port=port, servers=servers, maxconn=maxconn))
    process = factory([binary, "-db", "-f", str(config)], name="haproxy")
    process.wait_for_port(port, 10)
    return process, port
