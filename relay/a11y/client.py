"""The relay's side of the accessibility worker: one worker process per desktop.

A worker (``relay/a11y/worker.py``) is started on a desktop's first accessibility call, as the
desktop's user with the desktop's environment, in its own process group that joins the
desktop's processes (it stops with the desktop, and the orphan guard knows it). It is not
essential: if it dies or hangs it is killed and started again on the next call, and the desktop
keeps running. Calls to one desktop's worker run one at a time; other desktops have their own
workers, so a hung app in one desktop never delays another.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol

from wire.errors import ErrorCode, OpError

log = logging.getLogger(__name__)

# The worker's code travels on its standard input (its first line), so it runs whoever may
# read the relay's files: a desktop's user need not read the relay's installation.
CODE_ROOT: Final = Path(__file__).resolve().parents[2]
PACKAGES: Final = ("relay", "relay.a11y", "wire")
MODULES: Final = (
    "wire.errors",
    "wire.a11y_selector",
    "wire.a11y_match",
    "relay.policy",
    "relay.a11y.dbuswire",
    "relay.a11y.dbusconn",
    "relay.a11y.roles",
    "relay.a11y.nodes",
    "relay.a11y.bus",
    "relay.a11y.protocol",
    "relay.a11y.toolkits",
    "relay.a11y.reads",
    "relay.a11y.refs",
    "relay.a11y.apps",
    "relay.a11y.trees",
    "relay.a11y.session",
    "relay.a11y.elements",
    "relay.a11y.observe",
    "relay.a11y.find",
    "relay.a11y.actions",
    "relay.a11y.worker",
)
BOOT: Final = (
    "import json, sys, types\n"
    "bundle = json.loads(sys.stdin.buffer.readline())\n"
    "for name, source in bundle:\n"
    "    module = types.ModuleType(name)\n"
    "    module.__file__ = '<relaydesk ' + name + '>'\n"
    "    if not source:\n"
    "        module.__path__ = []\n"
    "    module.__package__ = name if not source else name.rpartition('.')[0]\n"
    "    sys.modules[name] = module\n"
    "    exec(compile(source, module.__file__, 'exec'), module.__dict__)\n"
    "sys.modules['relay.a11y.worker'].main()\n"
)


@functools.cache
def code_bundle() -> bytes:
    """The worker's modules as one JSON line: ``[[name, source], …]`` in import order
    (packages with no source)."""
    entries = [[name, ""] for name in PACKAGES]
    for name in MODULES:
        path = CODE_ROOT.joinpath(*name.split(".")).with_suffix(".py")
        entries.append([name, path.read_text(encoding="utf-8")])
    return json.dumps(entries).encode() + b"\n"


# Interpreters tried for the worker: it needs the distribution's GObject bindings (``gi``).
PYTHONS: Final = ("/usr/bin/python3", "python3")
READY_TIMEOUT_S: Final = 15.0
# Added to a call's own deadline before the worker is declared hung and killed.
CALL_SLACK_S: Final = 5.0
MAX_REPLY: Final = 16 * 1024 * 1024
# How long a failed start is remembered before the next call tries again.
RETRY_AFTER_S: Final = 5.0
ERROR_CODES: Final = {code.value: code for code in ErrorCode}


def a11y_python(configured: str | None = None) -> str | None:
    """The interpreter that can run the worker (it imports ``gi``), else None."""
    for candidate in (configured,) if configured else PYTHONS:
        path = shutil.which(candidate) if candidate else None
        if path is None:
            continue
        check = subprocess.run(
            [path, "-c", "import gi; from gi.repository import Gio"],
            capture_output=True,
            timeout=30,
            check=False,
        )
        if check.returncode == 0:
            return path
    return None


def op_error(error: Mapping[str, Any]) -> OpError:
    """A worker's ``{code, message, suggestion, …}`` as an ``OpError``."""
    code = ERROR_CODES.get(str(error.get("code")), ErrorCode.ACTION_FAILED)
    details = {k: v for k, v in error.items() if k not in ("code", "message")}
    return OpError(code, str(error.get("message", code.value))[:2000], details)


class A11yCaller(Protocol):
    """Whatever answers a desktop's accessibility calls: its worker, or a host helper's."""

    async def call(
        self, call: str, params: Mapping[str, Any], timeout_s: float
    ) -> dict[str, Any]: ...


class RunAs(Protocol):
    """The account a worker runs as (the desktop's user, ``relay/desktops/user.py``)."""

    def popen_kwargs(self) -> dict[str, Any]:
        """``subprocess.Popen`` arguments that drop to this account."""
        ...


@dataclass(frozen=True)
class WorkerSpec:
    """What one desktop's worker runs with."""

    python: str
    env: Mapping[str, str]
    user: RunAs | None
    log_path: Path | None


@dataclass
class _Process:
    """A running worker: the child, and its standard output as a stream."""

    popen: subprocess.Popen[bytes]
    stdout: asyncio.StreamReader
    transport: asyncio.ReadTransport

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def send(self, line: bytes) -> None:
        assert self.popen.stdin is not None
        self.popen.stdin.write(line)
        self.popen.stdin.flush()


class A11yWorker:
    """One desktop's worker process; ``call`` starts it when it is not running."""

    def __init__(
        self,
        name: str,
        spec: Callable[[], WorkerSpec],
        on_spawn: Callable[[int], Awaitable[None]] | None = None,
    ) -> None:
        self.name = name
        self._spec = spec
        self._on_spawn = on_spawn
        self._proc: _Process | None = None
        self._lock = asyncio.Lock()
        self._next_id = 0
        self._failed: tuple[float, str] | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.alive() else None

    async def call(self, call: str, params: Mapping[str, Any], timeout_s: float) -> dict[str, Any]:
        """One call; its error answers raise ``OpError``, a dead or hung worker raises
        ``a11y_unavailable``/``timeout`` (and is restarted on the next call)."""
        async with self._lock:
            proc = await self._running()
            self._next_id += 1
            request = {"id": self._next_id, "call": call, "params": dict(params)}
            try:
                proc.send(json.dumps(request, ensure_ascii=False).encode() + b"\n")
                async with asyncio.timeout(timeout_s + CALL_SLACK_S):
                    line = await proc.stdout.readline()
            except TimeoutError:
                await self._kill("did not answer in time")
                raise OpError(
                    ErrorCode.TIMEOUT,
                    f"the accessibility worker did not answer {call} within "
                    f"{timeout_s + CALL_SLACK_S:g} s; it was restarted",
                    {"suggestion": "try again; the app may be hung"},
                ) from None
            except (OSError, ValueError):
                line = b""
            if not line.endswith(b"\n"):
                await self._kill("exited")
                raise OpError(
                    ErrorCode.A11Y_UNAVAILABLE,
                    "the accessibility worker exited; it is started again on the next call",
                    {"suggestion": "retry once; else use the screen tool"},
                ) from None
            reply = json.loads(line)
            if reply.get("id") != self._next_id:
                await self._kill("answered out of order")
                raise OpError(
                    ErrorCode.A11Y_UNAVAILABLE,
                    "the accessibility worker broke its protocol; it was restarted",
                )
            if not reply.get("ok"):
                raise op_error(reply.get("error") or {})
            return dict(reply.get("result") or {})

    async def _running(self) -> _Process:
        if self._proc is not None and self._proc.alive():
            return self._proc
        if self._proc is not None:
            await self._kill("exited")
        if self._failed is not None and time.monotonic() - self._failed[0] < RETRY_AFTER_S:
            raise _unavailable(self._failed[1])
        try:
            self._proc = await self._start()
        except OpError as err:
            self._failed = (time.monotonic(), err.message)
            raise
        self._failed = None
        return self._proc

    async def _start(self) -> _Process:
        spec = self._spec()
        popen = await asyncio.to_thread(_spawn, spec)
        assert popen.stdout is not None and popen.stdin is not None
        with contextlib.suppress(OSError):  # it exited at once: no "ready" line says so below
            await asyncio.to_thread(_send_code, popen)
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=MAX_REPLY)
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), popen.stdout
        )
        proc = _Process(popen, reader, transport)
        self._proc = proc
        if self._on_spawn is not None:
            await self._on_spawn(popen.pid)
        try:
            async with asyncio.timeout(READY_TIMEOUT_S):
                line = await reader.readline()
            ready = json.loads(line) if line else {"ready": False, "reason": "it exited at start"}
        except (TimeoutError, ValueError):
            ready = {"ready": False, "reason": "it did not say it was ready"}
        if not ready.get("ready"):
            await self._kill("not ready")
            raise _unavailable(str(ready.get("reason", "unknown reason")))
        log.info("accessibility worker of %s started (pid %d)", self.name, popen.pid)
        return proc

    async def _kill(self, why: str) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.alive():
            log.info("accessibility worker of %s %s: stopping it", self.name, why)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        proc.transport.close()
        for stream in (proc.popen.stdin, proc.popen.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            await asyncio.to_thread(proc.popen.wait, 5)

    async def aclose(self) -> None:
        async with self._lock:
            await self._kill("stopping with its desktop")


def _send_code(popen: subprocess.Popen[bytes]) -> None:
    assert popen.stdin is not None
    popen.stdin.write(code_bundle())
    popen.stdin.flush()


def _spawn(spec: WorkerSpec) -> subprocess.Popen[bytes]:
    """Start the worker as the desktop's user (blocking)."""
    output: Any = subprocess.DEVNULL
    if spec.log_path is not None:
        output = open(spec.log_path, "ab")  # noqa: SIM115 - closed below, kept by the child
    try:
        return subprocess.Popen(
            [spec.python, "-s", "-E", "-c", BOOT],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=output,
            env=dict(spec.env),
            cwd=spec.env.get("HOME") or "/",
            start_new_session=True,
            close_fds=True,
            **(spec.user.popen_kwargs() if spec.user is not None else {}),
        )
    except OSError as err:
        raise _unavailable(f"cannot start the accessibility worker: {err}") from err
    finally:
        if output is not subprocess.DEVNULL:
            output.close()


def _unavailable(reason: str) -> OpError:
    return OpError(
        ErrorCode.A11Y_UNAVAILABLE,
        f"the desktop's accessibility bus cannot be read: {reason}",
        {"suggestion": "use the screen tool (screenshot, then a guarded click) instead"},
    )
