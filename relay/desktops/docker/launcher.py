"""``ContainerLauncher``: desktops in containers (``kind: docker``), one per slot.

A desktop is a container of ``docker/desktop.Dockerfile`` that the relay reaches only through
sockets in the desktop's directory (docs/docker.md, "Desktops in containers"); ``launch.py``
starts and removes one. The lifecycle (``relay/desktops/lifecycle.py``) runs them: this kind
adds whether Docker is there at all, and which recorded containers are still this relay's.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from relay.desktops.config import DesktopSettings
from relay.desktops.credentials import RelayAuthority
from relay.desktops.docker.config import DockerDesktopSettings, relay_key
from relay.desktops.docker.container import (
    LABEL_RELAY,
    LABEL_SESSION,
    ContainerDesktop,
    StartingContainer,
    beat,
)
from relay.desktops.docker.engine import DockerEngine, DockerEngineError
from relay.desktops.docker.launch import ContainerRunner, accepts, health
from relay.desktops.homes import Homes, remove_dirs
from relay.desktops.launcher import Records, StartOptions, rebuilt
from relay.desktops.lifecycle import Desktops, OnChange
from relay.desktops.probe import PROBE_ERRORS, ProbeResult
from relay.desktops.slots import Slots
from relay.desktops.user import DesktopUser
from relay.desktops.validation import StartRequest, parse_start
from wire.errors import ErrorCode, OpError
from wire.ids import DesktopSessionId
from wire.ops import DesktopKind

logger = logging.getLogger(__name__)

KIND: Final = "docker"
STATE_FILE: Final = "docker-desktops.json"
MINIMAL: Final = "minimal"
NO_DAEMON: Final = "no Docker daemon answers on this relay's host"

ContainerDesktops = Desktops[ContainerDesktop, StartingContainer, "ContainerLauncher"]


class ContainerLauncher:
    """Starts, checks and removes container desktops; says why none can start."""

    kind: DesktopKind = KIND
    noun = "docker desktops"
    authority_source = KIND
    # The records wait for a relay whose Docker answers: none is written before they are read.
    adopt_first = True

    def __init__(
        self,
        config: DesktopSettings,
        settings: DockerDesktopSettings,
        *,
        authority: RelayAuthority,
        sound_root: Path | None = None,
        audio_default: bool = False,
    ) -> None:
        self.config = config
        self.settings = settings
        self.authority = authority
        self.state_file = config.state_dir / STATE_FILE
        self.engine = DockerEngine(settings.socket) if settings.socket is not None else None
        self.key = relay_key(config.state_dir)
        # What a start that does not say ``audio`` gets (as for desktops of processes).
        self._audio_default = audio_default and sound_root is not None
        self._sound_root = sound_root
        self._homes = Homes(config)
        # Why no desktop can start here (None: they can); asked again by a start.
        self.unavailable: str | None = "not probed yet"

    def lifecycle(self, on_change: OnChange | None = None) -> ContainerDesktops:
        """The lifecycle that runs this launcher's desktops."""
        return Desktops(self, on_change)

    def attach(self, slots: Slots[ContainerDesktop, StartingContainer]) -> None:
        self.slots = slots

    # -- availability -----------------------------------------------------------------------

    async def probe(self) -> str | None:
        """Ask whether desktops can start: the daemon answers and has the desktop image."""
        self.unavailable = await self._why_unavailable()
        return self.unavailable

    async def _why_unavailable(self) -> str | None:
        if not self.settings.enabled:
            return "docker desktops are turned off on this relay (RELAYDESK_DOCKER_DESKTOPS)"
        if self.engine is None:
            return "DOCKER_HOST names no unix socket; the relay reaches Docker through one only"
        if not await asyncio.to_thread(self.engine.socket.exists):
            return NO_DAEMON
        if not await asyncio.to_thread(os.access, self.engine.socket, os.R_OK | os.W_OK):
            return (
                "this relay may not use the Docker daemon's socket (its user is not in the "
                "docker group, which is as powerful as root)"
            )
        try:
            await self.engine.version()
            if not await self.engine.has_image(self.settings.image):
                return (
                    f"this relay's Docker has no desktop image {self.settings.image} "
                    "(scripts/docker-build desktop builds it)"
                )
        except DockerEngineError as err:
            logger.info("docker desktops unavailable: %s", err)
            return NO_DAEMON
        return None

    # -- the lifecycle's part ---------------------------------------------------------------

    def check_kind(self, kind: str) -> None:
        return None  # the relay's backends route by kind: what comes here is docker

    def request(self, options: StartOptions) -> StartRequest:
        audio = self._audio_default if options.audio is None else options.audio
        req = parse_start(
            kind="virtual",
            slot=options.slot,
            geometry=options.geometry,
            depth=options.depth,
            audio=audio,
            started_by=options.started_by,
            apps=options.apps,
            default_apps=self.config.apps,
            allowed_apps=frozenset(self.config.allowed_apps),
            profile=options.profile,
            persist_home=options.persist_home,
        )
        if req.profile not in (None, MINIMAL):
            raise OpError(
                ErrorCode.UNAVAILABLE,
                "docker desktops run the window manager and the start-up apps only "
                "(profile minimal)",
                {"field": "profile"},
            )
        if req.persist_home:
            raise OpError(
                ErrorCode.UNAVAILABLE,
                "docker desktops keep no home between sessions",
                {"field": "persist_home"},
            )
        return req

    async def ready(self, req: StartRequest) -> None:
        if self.unavailable is not None:
            await self.probe()
        if self.unavailable is not None or self.engine is None:
            raise OpError(ErrorCode.UNAVAILABLE, self.unavailable or NO_DAEMON, {"field": "kind"})

    async def launch(self, req: StartRequest, session_id: DesktopSessionId) -> ContainerDesktop:
        user = await self._homes.desktop_user()
        run_dir = self._root() / session_id[:16]
        self.slots.starting[session_id] = StartingContainer(session_id, req.slot, run_dir)
        await self.slots.save()
        return await self._runner().launch(req, session_id, run_dir, user)

    def dead(self, desktop: ContainerDesktop) -> str | None:
        return None if desktop.alive() else "container exited"

    async def health(self, desktop: ContainerDesktop, retry: bool = False) -> ProbeResult:
        return await health(desktop, self.config.probe_timeout_s, retry=retry)

    async def freeze(self, desktop: ContainerDesktop, frozen: bool) -> None:
        """The Engine API's pause and unpause of the desktop's container."""
        if self.engine is None:
            raise OpError(ErrorCode.UNAVAILABLE, NO_DAEMON)
        try:
            await self.engine.pause(desktop.container_id, frozen)
        except DockerEngineError as err:
            verb = "paused" if frozen else "resumed"
            raise OpError(ErrorCode.UNAVAILABLE, f"the desktop could not be {verb}: {err}") from err

    async def frozen(self, desktop: ContainerDesktop) -> bool:
        if self.engine is None:
            return False
        try:
            info = await self.engine.inspect(desktop.container_id)
        except DockerEngineError:
            return False
        state = info.get("State") if info is not None else None
        return isinstance(state, dict) and state.get("Paused") is True

    async def remove(self, desktop: ContainerDesktop) -> bool:
        if self.engine is None:
            return True
        return await self._runner().remove(desktop)

    async def recorded(self) -> Records[ContainerDesktop, StartingContainer] | None:
        if self.engine is None or self.unavailable == NO_DAEMON:
            return None  # nothing can be checked: the records wait for a relay that can
        records, interrupted = await asyncio.to_thread(self.slots.state.load_all)
        return Records(
            rebuilt(records, ContainerDesktop.from_record, "a docker desktop"),
            rebuilt(interrupted, StartingContainer.from_record, "a docker desktop's start"),
        )

    async def adoptable(self, desktop: ContainerDesktop) -> bool:
        """The recorded container runs, is this relay's and this session's, with the same
        init; its heartbeat is touched and its display taken back for the probe."""
        assert self.engine is not None
        try:
            info = await self.engine.inspect(desktop.container_id)
        except DockerEngineError:
            info = None
        if not _still_ours(info, desktop, self.key):
            return False
        await asyncio.to_thread(beat, desktop.run_dir)
        await asyncio.to_thread(_reclaim_display, desktop)
        return True

    def leftover(self, desktop: ContainerDesktop) -> StartingContainer:
        return StartingContainer.of(desktop)

    async def discard(self, leftover: StartingContainer) -> bool:
        if self.engine is None:
            return False
        if leftover.desktop is not None:
            return await self._runner().remove(leftover.desktop)
        await self._runner().remove_named(leftover.desktop_session_id, leftover.run_dir)
        return True

    async def sweep(self, kept: set[DesktopSessionId], left_any: bool) -> None:
        """Containers labelled with this relay's key that no record keeps (a relay killed
        between creating one and recording it), and directories no desktop owns."""
        if self.engine is not None:
            await self._remove_strays(
                self.engine, {d.container_id for d in self.slots.desktops.values()}
            )
        names = {DesktopSessionId(d.run_dir.name) for d in self.slots.desktops.values()}
        await asyncio.to_thread(remove_dirs, self._root(), names)

    async def saving(self, busy: bool) -> None:
        # Containers run as the relay's desktop user too: while any does, the desktops of
        # processes' last stop leaves that account's processes alone (relay/desktops/teardown.py).
        if busy:
            await self._homes.desktop_user()
        self._homes.mark_busy(busy)

    async def beat(self, desktops: Sequence[ContainerDesktop]) -> None:
        await asyncio.to_thread(_beat_all, [d.run_dir for d in desktops])

    def sound_lost(self, desktop: ContainerDesktop) -> bool:
        return False  # asked of the sound server's socket by the watchdog (silent)

    def failed_programs(self, desktop: ContainerDesktop) -> list[str]:
        return []  # the container's programs are its own: its init reaps them

    async def silent(self, desktops: Sequence[ContainerDesktop]) -> list[ContainerDesktop]:
        """A desktop whose sound server stopped answering keeps running, silent."""
        silent: list[ContainerDesktop] = []
        for desktop in desktops:
            try:
                await accepts(desktop.pulse_dir / "native", self.config.probe_timeout_s)
            except PROBE_ERRORS:
                silent.append(desktop)
        return silent

    async def review(
        self, desktops: Sequence[ContainerDesktop]
    ) -> list[tuple[ContainerDesktop, str]]:
        return []

    async def desktop_user(self) -> DesktopUser | None:
        """Who the containers' sessions run as (the relay's leased account; None: the relay)."""
        return await self._homes.desktop_user()

    async def close(self, left: bool) -> None:
        if not left and self.slots.read:
            await asyncio.to_thread(_remove_if_empty, self._root())
        self._homes.release()
        if self.engine is not None:
            await self.engine.aclose()

    # -- internals ------------------------------------------------------------------------

    def _root(self) -> Path:
        return self.settings.root(self.config.state_dir, os.geteuid() == 0)

    def _runner(self) -> ContainerRunner:
        assert self.engine is not None
        return ContainerRunner(self.config, self.settings, self.engine, self.key, self._sound_root)

    async def _remove_strays(self, engine: DockerEngine, keep: set[str]) -> None:
        try:
            found = await engine.labelled({LABEL_RELAY: self.key})
        except DockerEngineError as err:
            logger.warning("cannot list this relay's containers: %s", err)
            return
        for container in found:
            container_id = str(container.get("Id", ""))
            if container_id and container_id not in keep:
                logger.info("removing stray desktop container %s", container_id[:12])
                await self._runner().remove_container(container_id)


def _still_ours(info: dict[str, Any] | None, desktop: ContainerDesktop, key: str) -> bool:
    """The recorded container runs, is this relay's and this session's, with the same init."""
    if info is None:
        return False
    labels = (info.get("Config") or {}).get("Labels") or {}
    state = info.get("State") or {}
    return (
        bool(state.get("Running"))
        and state.get("Pid") == desktop.init_pid
        and labels.get(LABEL_RELAY) == key
        and labels.get(LABEL_SESSION) == desktop.desktop_session_id
        and desktop.alive()
    )


def _reclaim_display(desktop: ContainerDesktop) -> None:
    """After a relay restart: the display's lock names the container, the link is in place."""
    display = desktop.host_display
    if display.holder() != desktop.init_pid:
        display.hand_to(desktop.init_pid)
    if not display.links_to(desktop.x11_dir) and not os.path.lexists(display.link):
        os.symlink(desktop.x11_dir / f"X{desktop.display}", display.link)


def _remove_if_empty(directory: Path) -> None:
    with contextlib.suppress(OSError):
        directory.rmdir()


def _beat_all(run_dirs: list[Path]) -> None:
    for run_dir in run_dirs:
        beat(run_dir)
