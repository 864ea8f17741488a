"""Each desktop's file worker: one long-lived child (``home_child.py serve``) that answers the
home file ops (``desktop.home_file``: list, read, write, delete, and how much of an upload is
held) one request at a time (docs/files.md).

Starting a child as the desktop's user for every op costs more than the op itself: an
interpreter's start, and joining the desktop's processes (which saves the relay's state
file). The worker pays that once. It is started with a desktop's first file op, as the
desktop's user, held until it has joined the desktop's processes and cgroup like every desktop
tool's command, so it stops with the desktop. It checks confinement where it opens each file,
exactly as the one-request child did: the relay still opens no file of a home. A worker that
has died (killed, or an op over its time limit, which kills it) is replaced at the next op.

Uploads and downloads keep a child of their own (``home_stream.py``): they hold its standard
input and output for the whole transfer.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field
from typing import Any, Final, cast

from relay.desktop_tools.home_files import (
    ANSWER_CAP,
    REQUEST_FIELDS,
    HomeFileSettings,
    refusal,
)
from relay.desktop_tools.home_stream import ChildStream, start_child
from relay.desktop_tools.session import DesktopSession
from wire.errors import ErrorCode, OpError
from wire.home_files import LIST_MAX, READ_MAX, HomeFileArgs, HomeFileResult, check_home_file_args

log = logging.getLogger(__name__)

WORKER_CHILD: Final = "home-file-worker"
SERVE: Final = ("serve",)
TIMEOUT_S: Final = 20.0


@dataclass
class HomeFileWorker:
    """One desktop's worker, and the lock that keeps its requests one at a time."""

    stream: ChildStream
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    broken: bool = False

    @property
    def alive(self) -> bool:
        return not self.broken and self.stream.popen.poll() is None

    async def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        """The worker's answer to one request (the caller holds :attr:`lock`)."""
        self.stream.stdin.write(json.dumps(request).encode() + b"\n")
        await self.stream.stdin.drain()
        line = await self.stream.stdout.readline()
        if not line.endswith(b"\n"):
            raise OpError(ErrorCode.ACTION_FAILED, "the file worker ended during the operation")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def discard(self) -> None:
        """Kill it: a request it may still answer would be read as the next one's answer.
        The next op reaps it and starts another."""
        self.broken = True
        self.stream.kill()


class HomeFileWorkers:
    """The file workers of a relay's desktops, by ``desktop_session_id``."""

    def __init__(self, settings: HomeFileSettings) -> None:
        self.settings = settings
        self._workers: dict[str, HomeFileWorker] = {}
        self._starting = asyncio.Lock()

    async def run(self, session: DesktopSession, args: HomeFileArgs) -> HomeFileResult:
        """Run one home file op as the desktop's user and answer its result."""
        check_home_file_args(args)
        request: dict[str, Any] = {k: v for k, v in args.items() if k in REQUEST_FIELDS}
        request.update(
            home=str(session.home),
            file_max=self.settings.file_max,
            read_max=READ_MAX,
            list_max=LIST_MAX,
        )
        worker = await self._worker(session)
        async with worker.lock:
            try:
                async with asyncio.timeout(TIMEOUT_S):
                    answer = await worker.ask(request)
            except TimeoutError:
                worker.discard()
                raise OpError(
                    ErrorCode.TIMEOUT, f"the file operation did not finish in {TIMEOUT_S:g} s"
                ) from None
            except (OSError, ValueError) as err:
                worker.discard()
                raise OpError(ErrorCode.ACTION_FAILED, f"the file worker failed: {err}") from err
            except BaseException:  # it ended, or the caller gave up mid-request
                worker.discard()
                raise
        if not answer.get("ok"):
            raise refusal(answer)
        result = dict(answer.get("result") or {})
        result["desktop_session_id"] = session.desktop_session_id
        return cast(HomeFileResult, result)

    async def _worker(self, session: DesktopSession) -> HomeFileWorker:
        """The desktop's live worker, started when it has none (or its last one died)."""
        async with self._starting:
            await self._prune()
            worker = self._workers.get(session.desktop_session_id)
            if worker is not None:
                return worker
            stream = await start_child(session, WORKER_CHILD, SERVE, ANSWER_CAP)
            log.info("file worker started for desktop %s", session.display)
            worker = self._workers[session.desktop_session_id] = HomeFileWorker(stream)
            return worker

    async def _prune(self) -> None:
        """Forget the workers that died: killed, or stopped with their desktop."""
        for desktop_session_id, worker in list(self._workers.items()):
            if not worker.alive and not worker.lock.locked():
                await self._end(desktop_session_id, worker)

    async def _end(self, desktop_session_id: str, worker: HomeFileWorker) -> None:
        if self._workers.get(desktop_session_id) is worker:
            del self._workers[desktop_session_id]
        worker.discard()
        await worker.stream.aclose()
