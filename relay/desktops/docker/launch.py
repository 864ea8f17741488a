"""Starting, probing and removing one container desktop.

A start prepares the desktop's directory, claims a display number on the host, has Docker
create and start the container, names its init process in the display's lock, and probes the
desktop ready through its sockets (an RFB banner from x11vnc, which greets only once it holds
the display). Any failure removes everything the start made. A removal kills and removes the
container, then frees the display number and the directory.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import psutil

from relay.desktops.audio import REASON_NOT_REQUESTED, REASON_NOT_STARTED, REASON_UNAVAILABLE
from relay.desktops.config import DesktopSettings
from relay.desktops.credentials import DesktopCredentials
from relay.desktops.docker.config import DockerDesktopSettings
from relay.desktops.docker.container import (
    X11_DIR,
    ContainerDesktop,
    ContainerSpec,
    container_name,
    log_tail,
    prepare_run_dir,
)
from relay.desktops.docker.display import HostDisplay, link_sound, unlink_sound
from relay.desktops.docker.engine import DockerEngine, DockerEngineError
from relay.desktops.probe import (
    BANNER_LEN,
    PROBE_ERRORS,
    ProbeFailed,
    ProbeResult,
    check_banner,
    describe,
    poll_until_ready,
)
from relay.desktops.slots import now_iso
from relay.desktops.user import DesktopUser
from relay.desktops.validation import StartRequest
from wire.errors import ErrorCode, OpError
from wire.ids import DesktopSessionId

logger = logging.getLogger(__name__)

SOUND_WAIT_S: Final = 5.0
REMOVE_WAIT_S: Final = 15.0
_REMOVE_POLL_S: Final = 0.1


async def rfb_banner_unix(path: Path, timeout_s: float) -> bytes:
    """Connect to a VNC server's unix socket and read its protocol banner."""
    async with asyncio.timeout(timeout_s):
        reader, writer = await asyncio.open_unix_connection(str(path))
        try:
            return check_banner(await reader.readexactly(BANNER_LEN))
        finally:
            writer.close()


async def accepts(path: Path, timeout_s: float) -> None:
    """A unix socket that accepts a connection (the sound server's)."""
    async with asyncio.timeout(timeout_s):
        _, writer = await asyncio.open_unix_connection(str(path))
    writer.close()


def sockets_intact(desktop: ContainerDesktop) -> bool:
    """The VNC server's socket is a socket and the display's link is still ours: the
    container cannot swap them for links that lead the relay somewhere else unnoticed."""
    try:
        vnc = desktop.vnc_socket.lstat()
    except OSError:
        return False
    return stat.S_ISSOCK(vnc.st_mode) and desktop.host_display.links_to(desktop.x11_dir)


async def health(desktop: ContainerDesktop, timeout_s: float, retry: bool = False) -> ProbeResult:
    """Cheap checks first (the container's init process, the sockets), then an RFB banner;
    ``retry``: a failed banner is asked for once more (one slow answer is no failure)."""
    started = time.monotonic()
    if not desktop.alive():
        return ProbeResult(ok=False, reason="container exited", checks={"container": False})
    if not await asyncio.to_thread(sockets_intact, desktop):
        return ProbeResult(
            ok=False,
            reason="the desktop's sockets were replaced",
            checks={"container": True, "sockets": False},
        )
    failure = await _banner_failure(desktop, timeout_s)
    if failure is not None and retry and desktop.alive():
        failure = await _banner_failure(desktop, timeout_s)
    checks = {"container": True, "sockets": True, "rfb": failure is None}
    reason = None if failure is None else f"rfb: {failure}"
    elapsed = (time.monotonic() - started) * 1000
    return ProbeResult(ok=failure is None, reason=reason, checks=checks, elapsed_ms=elapsed)


async def _banner_failure(desktop: ContainerDesktop, timeout_s: float) -> str | None:
    try:
        await rfb_banner_unix(desktop.vnc_socket, timeout_s)
    except (ProbeFailed, *PROBE_ERRORS, asyncio.IncompleteReadError) as err:
        return describe(err)
    return None


@dataclass
class _Made:
    """What a start has made so far (removed again when it fails)."""

    run_dir: Path
    display: HostDisplay | None = None
    container_id: str | None = None
    init_pid: int | None = None


class ContainerRunner:
    """Starts and removes container desktops (the lifecycle holds its lock around both)."""

    def __init__(
        self,
        config: DesktopSettings,
        settings: DockerDesktopSettings,
        engine: DockerEngine,
        relay_key: str,
        sound_root: Path | None,
    ) -> None:
        self.config = config
        self.settings = settings
        self.engine = engine
        self.relay_key = relay_key
        self.sound_root = sound_root

    async def launch(
        self,
        req: StartRequest,
        session_id: DesktopSessionId,
        run_dir: Path,
        user: DesktopUser | None,
    ) -> ContainerDesktop:
        """Start one desktop; ``OpError(START_FAILED)`` (everything removed) when it does not
        come up within the start timeout."""
        began = time.monotonic()
        deadline = began + self.settings.start_timeout_s
        made = _Made(run_dir)
        try:
            desktop = await self._launch(req, session_id, user, made, deadline)
        except BaseException as err:
            failed = isinstance(err, DockerEngineError | ProbeFailed | OSError)
            tail = await asyncio.to_thread(log_tail, run_dir) if failed else ""
            await asyncio.shield(self._abandon(made))
            if failed:
                logger.warning(
                    "docker desktop %s did not start: %s; its session said:\n%s",
                    req.slot,
                    err,
                    tail,
                )
                message = f"the desktop's container did not start: {err}"
                raise OpError(ErrorCode.START_FAILED, message) from err
            raise
        logger.info(
            "docker desktop slot=%s display=:%d ready in %.2f s",
            req.slot,
            desktop.display,
            time.monotonic() - began,
        )
        return desktop

    async def _launch(
        self,
        req: StartRequest,
        session_id: DesktopSessionId,
        user: DesktopUser | None,
        made: _Made,
        deadline: float,
    ) -> ContainerDesktop:
        credentials = DesktopCredentials.new()
        await asyncio.to_thread(prepare_run_dir, made.run_dir, user, credentials)
        made.display = await asyncio.to_thread(HostDisplay.claim, made.run_dir / X11_DIR)
        sound = req.audio and self.sound_root is not None
        spec = self._spec(req, session_id, made, user, sound)
        made.container_id = await self.engine.create(
            container_name(session_id), spec.config(self.settings)
        )
        await self.engine.start(made.container_id)
        pid, started = await self._init_process(made.container_id)
        made.init_pid = pid
        await asyncio.to_thread(made.display.hand_to, pid)
        desktop = ContainerDesktop(
            desktop_session_id=session_id,
            slot=req.slot,
            geometry=req.geometry,
            depth=req.depth,
            display=made.display.number,
            started_at=now_iso(),
            started_by=req.started_by,
            run_dir=made.run_dir,
            container_id=made.container_id,
            init_pid=pid,
            init_started=started,
            credentials=credentials,
        )
        timeout = self.config.probe_timeout_s

        async def banner() -> None:
            await rfb_banner_unix(desktop.vnc_socket, timeout)

        await poll_until_ready(banner, deadline, "the desktop's container", desktop.alive)
        desktop.audio_reason = await self._sound(desktop, req.audio, sound)
        desktop.audio = desktop.audio_reason is None
        return desktop

    def _spec(
        self,
        req: StartRequest,
        session_id: str,
        made: _Made,
        user: DesktopUser | None,
        sound: bool,
    ) -> ContainerSpec:
        assert made.display is not None
        wm = (self.config.window_manager,) if self.config.window_manager else ()
        return ContainerSpec(
            session_id=session_id,
            slot=req.slot,
            relay_key=self.relay_key,
            run_dir=made.run_dir,
            display=made.display.number,
            geometry=req.geometry,
            depth=req.depth,
            audio=sound,
            programs=(*wm, *req.apps),
            x11vnc_flags=self.config.x11vnc_flags,
            orphan_timeout_s=self.config.orphan_timeout_s,
            user=user,
        )

    async def _init_process(self, container_id: str) -> tuple[int, float]:
        """The running container's init process on this host: pid and start time. The relay
        must share the daemon's process namespace (it runs on the Docker host)."""
        info = await self.engine.inspect(container_id)
        state = (info or {}).get("State") or {}
        pid = int(state.get("Pid") or 0)
        if not state.get("Running") or pid <= 1:
            raise ProbeFailed(f"the container is {state.get('Status', 'gone')}")
        started = await asyncio.to_thread(_process_of_container, pid, container_id)
        if started is None:
            raise ProbeFailed(
                "the container's processes are not visible to the relay: it must run on the "
                "Docker host, in the daemon's process namespace"
            )
        return pid, started

    async def _sound(self, desktop: ContainerDesktop, requested: bool, started: bool) -> str | None:
        """None when the desktop has sound, else why not (the row's ``audio_reason``)."""
        if not requested:
            return REASON_NOT_REQUESTED
        if not started or self.sound_root is None:
            return REASON_UNAVAILABLE
        try:
            await poll_until_ready(
                lambda: accepts(desktop.pulse_dir / "native", self.config.probe_timeout_s),
                time.monotonic() + SOUND_WAIT_S,
                "pulseaudio",
                desktop.alive,
            )
        except ProbeFailed as err:
            logger.warning("docker desktop %s: no sound: %s", desktop.slot, err)
            return REASON_NOT_STARTED
        await asyncio.to_thread(
            link_sound, self.sound_root, desktop.display, desktop.pulse_dir, os.geteuid() == 0
        )
        return None

    async def remove(self, desktop: ContainerDesktop) -> bool:
        """Kill and remove the container, then free its display and directory; whether the
        container is gone."""
        made = _Made(desktop.run_dir, desktop.host_display, desktop.container_id, desktop.init_pid)
        return await self._abandon(made)

    async def remove_named(self, session_id: str, run_dir: Path) -> None:
        """What an interrupted start left: its container (by name) and its directory."""
        await self._abandon(_Made(run_dir, container_id=container_name(session_id)))

    async def _abandon(self, made: _Made) -> bool:
        gone = True
        if made.container_id is not None:
            gone = await self.remove_container(made.container_id)
        if made.display is not None:
            pids = (os.getpid(), *((made.init_pid,) if made.init_pid else ()))
            await asyncio.to_thread(made.display.release, made.run_dir / X11_DIR, pids)
            if self.sound_root is not None:
                await asyncio.to_thread(
                    unlink_sound, self.sound_root, made.display.number, made.run_dir / "pulse"
                )
        await asyncio.to_thread(shutil.rmtree, made.run_dir, True)
        return gone

    async def remove_container(self, container_id: str) -> bool:
        """``DELETE`` with force, then wait (bounded) until Docker no longer has it."""
        try:
            await self.engine.remove(container_id)
            deadline = time.monotonic() + REMOVE_WAIT_S
            while await self.engine.inspect(container_id) is not None:
                if time.monotonic() > deadline:
                    logger.error("container %s still present after its removal", container_id[:12])
                    return False
                await asyncio.sleep(_REMOVE_POLL_S)
        except DockerEngineError as err:
            logger.error("cannot remove container %s: %s", container_id[:12], err)
            return False
        return True


def _process_of_container(pid: int, container_id: str) -> float | None:
    """The start time of ``pid`` when it is the container's (its cgroup names the container,
    with cgroup v1 and v2 alike), else None: another process namespace, or a reused pid."""
    try:
        cgroup = Path(f"/proc/{pid}/cgroup").read_text(encoding="ascii", errors="replace")
        started = psutil.Process(pid).create_time()
    except (OSError, psutil.Error):
        return None
    return float(started) if container_id in cgroup else None
