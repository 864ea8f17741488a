"""The accessibility tools on the host's real screen: the relay's worker, run in this session.

The host helper runs inside the person's desktop session, so the worker it starts
(``relay/a11y/worker.py``, the same one virtual desktops use) reads that session's
accessibility bus: found from the session bus the helper was started with
(``DBUS_SESSION_BUS_ADDRESS``, else ``$XDG_RUNTIME_DIR/bus``). Without one the calls answer
``a11y_unavailable`` saying so. The relay sends its accessibility policy with each call (the
policy is the relay's); a worker started under another policy is replaced.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from relay.a11y.client import A11yWorker, WorkerSpec, a11y_python
from wire.errors import ErrorCode, InvalidInput, OpError
from wire.ops import A11Y_CALLS

# What of the helper's environment the worker gets: the session's display and bus, no secrets.
PASSED_ENV: Final = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LC_ALL",
    "DISPLAY",
    "XAUTHORITY",
    "DBUS_SESSION_BUS_ADDRESS",
    "XDG_RUNTIME_DIR",
)
POLICY_PREFIX: Final = "RELAYDESK_A11Y_"
MAX_TIMEOUT_S: Final = 60.0


def session_bus(env: Mapping[str, str]) -> str | None:
    """The session's bus address, or None when the session has none."""
    if address := env.get("DBUS_SESSION_BUS_ADDRESS"):
        return address
    runtime = env.get("XDG_RUNTIME_DIR")
    if runtime and (Path(runtime) / "bus").is_socket():
        return f"unix:path={Path(runtime) / 'bus'}"
    return None


class HostA11y:
    """The worker of the host's screen, started on the first call."""

    def __init__(self, display: str, env: Mapping[str, str] | None = None) -> None:
        self.display = display
        self._env = dict(os.environ if env is None else env)
        self._worker: A11yWorker | None = None
        self._policy: dict[str, str] = {}
        self._python: str | bool | None = False

    def _spec(self) -> WorkerSpec:
        env = {k: v for k, v in self._env.items() if k in PASSED_ENV}
        env["DISPLAY"] = self.display
        env["DBUS_SESSION_BUS_ADDRESS"] = session_bus(self._env) or ""
        assert isinstance(self._python, str)
        return WorkerSpec(self._python, env | self._policy, None, None)

    async def call(self, body: Mapping[str, Any]) -> dict[str, Any]:
        call, params = body.get("call"), body.get("params", {})
        if call not in A11Y_CALLS and call != "text":
            raise InvalidInput("call", f"must be one of {', '.join(A11Y_CALLS)}")
        if not isinstance(params, dict):
            raise InvalidInput("params", "must be an object")
        timeout = body.get("timeout_s", 10.0)
        if not isinstance(timeout, int | float) or not 0 < timeout <= MAX_TIMEOUT_S:
            raise InvalidInput("timeout_s", f"must be a number from 0 to {MAX_TIMEOUT_S:g}")
        policy = body.get("policy", {})
        if not isinstance(policy, dict) or not all(
            isinstance(k, str) and k.startswith(POLICY_PREFIX) and isinstance(v, str)
            for k, v in policy.items()
        ):
            raise InvalidInput("policy", f"must map {POLICY_PREFIX}* names to strings")
        if session_bus(self._env) is None:
            raise OpError(
                ErrorCode.A11Y_UNAVAILABLE,
                "the host helper's session has no D-Bus session bus (DBUS_SESSION_BUS_ADDRESS "
                "is unset and $XDG_RUNTIME_DIR/bus does not exist), so its screen's "
                "accessibility bus cannot be found: start the host helper inside the desktop "
                "session",
                {"suggestion": "use the screen tool on the local screen"},
            )
        return await (await self._worker_for(policy)).call(str(call), params, float(timeout))

    async def _worker_for(self, policy: dict[str, str]) -> A11yWorker:
        if self._python is False:
            self._python = await asyncio.to_thread(
                a11y_python, self._env.get("RELAYDESK_A11Y_PYTHON")
            )
        if not isinstance(self._python, str):
            raise OpError(
                ErrorCode.A11Y_UNAVAILABLE,
                "this host has no Python with the GObject bindings the accessibility tools "
                "need (Debian: python3-gi)",
            )
        if self._worker is not None and policy != self._policy:
            await self._worker.aclose()
            self._worker = None
        if self._worker is None:
            self._policy = dict(policy)
            self._worker = A11yWorker("the host's screen", self._spec)
        return self._worker

    async def aclose(self) -> None:
        if self._worker is not None:
            await self._worker.aclose()
            self._worker = None
