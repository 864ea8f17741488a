"""Container health check of the server image: ``GET /readyz`` must answer 200.

Reads the address the server binds from ``RELAYDESK_HOST``/``RELAYDESK_PORT``, as the server does.
"""

import os
import sys
import urllib.request

host = os.environ.get("RELAYDESK_HOST", "127.0.0.1")
if host in {"", "0.0.0.0", "::"}:  # a wildcard bind answers on loopback too
    host = "127.0.0.1"
if ":" in host:
    host = f"[{host}]"
port = os.environ.get("RELAYDESK_PORT", "8400")
try:
    with urllib.request.urlopen(f"http://{host}:{port}/readyz", timeout=4) as response:
        sys.exit(0 if response.status == 200 else 1)
except OSError as err:
    sys.stderr.write(f"readyz: {err}\n")
    sys.exit(1)
