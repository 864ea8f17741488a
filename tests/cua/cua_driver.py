"""Cua's own client (``cua-computer``), driven line by line by a test (run under .venv-cua).

``python cua_driver.py BASE_URL MODE`` with the API token in ``RELAYDESK_API_TOKEN``: it builds
``Computer(os_type="linux", use_host_computer_server=True, api_base_url=BASE_URL,
api_headers={"Authorization": "Bearer …"})`` (or with ``MODE`` ``x-api-key``, the token in
Cua's ``X-API-Key`` header), runs its readiness sequence (``computer.run()``), prints
``{"ready": seconds}``, then reads one JSON request a line from stdin — ``{"method": name,
"args": [...], "kwargs": {...}}`` on ``computer.interface`` — and prints one JSON line per
request: ``{"ok": true, "result": …, "seconds": …}`` (bytes as base64) or ``{"ok": false,
"error": "…"}``. With ``MODE`` ``ws`` the client's REST address points at a closed port, so
every command really fails over REST and goes through Cua's ``/ws`` fallback.

This file runs only in Cua's virtualenv: it imports nothing of relaydesk's.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sys
import time
from typing import Any

os.environ.setdefault("CUA_TELEMETRY", "off")
os.environ.setdefault("DO_NOT_TRACK", "1")

from computer import Computer
from computer.interface.generic import GenericComputerInterface

CLOSED_PORT_URL = "http://127.0.0.1:9/cmd"


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"bytes_b64": base64.b64encode(value).decode()}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if hasattr(value, "__dict__") and not isinstance(value, type):
        return {k: _plain(v) for k, v in vars(value).items() if not k.startswith("_")}
    return value


def _emit(record: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


async def main() -> None:
    base_url, mode = sys.argv[1], sys.argv[2]
    token = os.environ["RELAYDESK_API_TOKEN"]
    headers = {"X-API-Key": token} if mode == "x-api-key" else {"Authorization": f"Bearer {token}"}
    if mode == "ws":
        GenericComputerInterface.rest_uri = property(lambda self: CLOSED_PORT_URL)  # type: ignore[assignment,method-assign]
    computer = Computer(
        os_type="linux",
        use_host_computer_server=True,
        api_base_url=base_url,
        api_headers=headers,
        telemetry_enabled=False,
    )
    started = time.perf_counter()
    await computer.run()
    _emit({"ready": time.perf_counter() - started})
    interface = computer.interface
    loop = asyncio.get_running_loop()
    while line := await loop.run_in_executor(None, sys.stdin.readline):
        request = json.loads(line)
        began = time.perf_counter()
        try:
            method = getattr(interface, request["method"])
            result = await method(*request.get("args", []), **request.get("kwargs", {}))
        except Exception as err:  # the test reads what Cua's client raised
            _emit({"ok": False, "error": f"{type(err).__name__}: {err}"})
            continue
        _emit({"ok": True, "result": _plain(result), "seconds": time.perf_counter() - began})
    await computer.stop()


if __name__ == "__main__":
    asyncio.run(main())
