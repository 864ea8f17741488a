"""The relay process: desktops + worker, started and stopped in a fixed order."""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import secrets
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from relay.audio import AudioStreams, CaptureAccount
from relay.backend import DesktopBackend
from relay.config import RelaySettings
from relay.desktops.audio import PulseAudioStarter
from relay.desktops.backend import VirtualBackend
from relay.desktops.docker.backend import DockerBackend
from relay.desktops.docker.launcher import ContainerLauncher
from relay.desktops.idle import IdlePause
from relay.desktops.launch import missing_binaries
from relay.desktops.pool import WarmPool
from relay.desktops.processes import ProcessLauncher
from relay.desktops.screens import SharedScreenService
from relay.handlers import Handlers
from relay.local_desktop import HostHelperClient, LocalDesktop
from relay.recording.service import RelayRecordings
from relay.worker import RelayWorker, process_age_s
from wire.ids import DesktopSessionId
from wire.ops import RelayRow

log = logging.getLogger(__name__)

# Names the relay process that last took this state directory: a relay replaced by a newer
# connection hands its desktops over only to a process that took the same state (and so
# re-adopted them); any other successor does not have them, and they are stopped.
OWNER_FILE = "relay.owner"
# The reason the server records for desktops a relay stopped because it was itself stopping.
RELAY_STOPPED = "relay_stopped"


class StateOwner:
    """This process's claim on the relay state directory."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / OWNER_FILE
        self.claim = f"{os.getpid()}-{secrets.token_hex(8)}"

    def take(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{OWNER_FILE}.{self.claim}")
        tmp.write_text(self.claim, encoding="ascii")
        tmp.replace(self.path)

    def taken_by_another(self) -> bool:
        """Whether a newer relay process took the state directory since :meth:`take`."""
        try:
            return self.path.read_text(encoding="ascii").strip() != self.claim
        except OSError:
            return False


class RelayService:
    """Owns the relay's desktops and the server connection of one relay process."""

    def __init__(self, settings: RelaySettings) -> None:
        self.settings = settings
        desktop_config = settings.desktops
        audio = settings.audio  # relay/desktops/audio.py, docs/audio.md
        # One lifecycle per kind of desktop, each with its launcher (relay/desktops/).
        self.desktops = ProcessLauncher(
            desktop_config,
            audio=PulseAudioStarter(audio) if audio.available else None,
            audio_default=audio.default_on,
        ).lifecycle(self._desktop_changed)
        # Ready desktops a matching start takes (RELAYDESK_POOL; relay/desktops/pool.py).
        pool = (
            WarmPool(
                self.desktops,
                dict(desktop_config.pool),
                concurrency=desktop_config.pool_concurrency,
            )
            if desktop_config.pool and not missing_binaries(desktop_config)
            else None
        )
        self.desktops.pool = pool
        # The relay's own X connections (screen tool, keyboard state) find each desktop's
        # cookie here; set once, before any of them opens (relay/desktops/credentials.py).
        self.desktops.authority.use_in_process()
        self.audio = AudioStreams(settings.audio_bitrate, self._capture_account)
        # One screen service for every backend, made by the first screen action.
        self.screen = SharedScreenService(settings.tools.denied)
        # The host helper's local desktop (relay/local_desktop.py, docs/host-helper.md).
        self.local = (
            LocalDesktop(
                HostHelperClient(settings.host_helper_url, settings.host_helper_token),
                self._desktop_changed,
                on_input=self._person_input,
            )
            if settings.host_helper_url
            else None
        )
        if self.local is not None:
            self.local.a11y_policy = settings.a11y.worker_env()
            self.local.denied_apps = settings.tools.denied
        # One backend per kind of desktop this relay runs (relay/backend.py).
        backends: list[DesktopBackend] = [
            VirtualBackend(
                self.desktops,
                self.screen,
                missing=missing_binaries(desktop_config),
                a11y=settings.a11y,
            )
        ]
        if self.local is not None:
            backends.append(self.local)
        # Desktops in containers (relay/desktops/docker/backend.py, docs/docker.md).
        self.docker = DockerBackend(
            ContainerLauncher(
                desktop_config,
                settings.docker,
                authority=self.desktops.authority,
                sound_root=audio.runtime_root if audio.available else None,
                audio_default=audio.default_on,
            ).lifecycle(self._desktop_changed),
            self.screen,
            a11y=settings.a11y,
        )
        backends.append(self.docker)
        # Recorded desktops (relay/recording, docs/recording.md).
        self.recordings = RelayRecordings(
            desktop_config.state_dir / "recordings",
            self._grab_screen,
            self._send_event,
            lambda session_id: self.handlers.located_row(session_id),
            hear=self.audio.record if audio.available else None,
        )
        self.handlers = Handlers(
            backends,
            channel_targets={"audio": self.audio.open_channel} if audio.available else None,
            direct_host=settings.direct_vnc_host,
            a11y=settings.a11y,
            tools=settings.tools,
            recordings=self.recordings,
            pool=pool.report if pool is not None else None,
        )
        # A stop ends the desktop's recording and closes its viewer channels before it ends
        # its processes.
        self.desktops.on_leaving = self._desktop_leaving
        self.docker.desktops.on_leaving = self._desktop_leaving
        # Desktops nobody uses are paused (RELAYDESK_IDLE_PAUSE_S; relay/desktops/idle.py).
        self.idle = IdlePause(
            desktop_config.idle_pause_s,
            [self.desktops, self.docker.desktops],
            self.handlers.activity,
            watched=lambda session_id: self.handlers.channels.count(session_id) > 0,
            recorded=lambda session_id: session_id in self.recordings.recorders,
        )
        self.worker = RelayWorker(settings, self.handlers)
        self.owner = StateOwner(desktop_config.state_dir)
        self._stopping_desktops: asyncio.Task[None] | None = None

    async def _capture_account(self, row: RelayRow) -> CaptureAccount:
        """A desktop's audio capture runs as its desktop's account, in its cgroup."""
        if row.get("kind") == "docker":
            return CaptureAccount(await self.docker.desktops.desktop_user())
        session_id = row["desktop_session_id"]
        return CaptureAccount(
            await self.desktops.desktop_user(),
            functools.partial(self.desktops.launcher.enter_cgroup, session_id),
        )

    async def _desktop_changed(self, row: Mapping[str, Any]) -> None:
        await self.recordings.desktop_changed(row)
        await self.worker.send_event("desktop.changed", dict(row))

    async def _desktop_leaving(self, desktop_session_id: DesktopSessionId) -> None:
        await self.recordings.desktop_left(desktop_session_id)
        await self.handlers.channels.close_desktop(desktop_session_id)

    async def _send_event(self, name: str, data: dict[str, Any]) -> None:
        await self.worker.send_event(name, data)

    async def _grab_screen(self, display: str, desktop_session_id: str) -> Any:
        """A desktop's screen as the screen tool captures it (BGRA), for its recording."""
        service = self.screen()
        await service.bind(display, desktop_session_id)
        return await service.run_in_display(display, lambda ctx: ctx.grab_bgra())

    async def _person_input(self, row: Mapping[str, Any]) -> None:
        """Someone used the host's real screen (the host helper's XInput2 watch)."""
        await self.worker.send_event("desktop.person_input", dict(row))

    def stop(self) -> None:
        """Shut down. With ``--stop-desktops-on-exit`` the desktops are stopped first, while
        the server still hears it (it records them stopped, not lost with the connection);
        a second stop closes at once."""
        if self.settings.stop_desktops_on_exit and self._stopping_desktops is None:
            self._stopping_desktops = asyncio.get_running_loop().create_task(
                self._stop_desktops_then_close(), name="relay-stopping-desktops"
            )
        else:
            self.worker.stop()

    async def _stop_desktops_then_close(self) -> None:
        try:
            for lifecycle in (self.desktops, self.docker.desktops):
                stopped = await lifecycle.stop_all(RELAY_STOPPED)
                for row in stopped:
                    log.info("stopped %s desktop slot=%s", row["kind"], row["slot"])
        except Exception:
            log.exception("stopping the desktops before closing failed")
        finally:
            self.worker.stop()

    async def run(self) -> None:
        """Re-adopt surviving desktops, serve the server, then shut down in order."""
        log.info("relay starting", extra={"since_exec_s": round(process_age_s(), 3)})
        began = time.monotonic()
        await asyncio.to_thread(self.owner.take)
        # What the last relay left that is not re-adopted is stopped after the hello.
        adopted = await self.desktops.adopt(clean_up_later=True)
        log.info(
            "re-adopted %d desktop(s) from the previous relay run",
            len(adopted),
            extra={
                "adopt_s": round(time.monotonic() - began, 3),
                "since_exec_s": round(process_age_s(), 3),
            },
        )
        self.desktops.start_watchdog()
        self.desktops.start_pool()
        self.idle.start()
        await self.docker.open()
        if self.local is not None:
            self.local.start_watch()
        live = [row for backend in self.handlers.backends.values() for row in await backend.rows()]
        self.recordings.adopt(live)
        self.recordings.start_reannouncing()
        try:
            await self.worker.run()
        finally:
            if self._stopping_desktops is not None:
                await self._stopping_desktops
            await self.idle.close()
            await self.recordings.aclose()
            await self.screen.aclose()
            await self.audio.aclose()
            if self.local is not None:
                await self.local.aclose()
            stop_desktops = await self._stop_desktops_on_exit()
            # A relay process that took this state directory over stops the pool's instead.
            handed_over = self.worker.replaced and await asyncio.to_thread(
                self.owner.taken_by_another
            )
            await self.desktops.close(stop_desktops=stop_desktops, stop_pool=not handed_over)
            await self.docker.desktops.close(stop_desktops=stop_desktops)
            log.info("relay stopped")

    async def _stop_desktops_on_exit(self) -> bool:
        """Replaced by a newer connection, the desktops go to the new relay process if it took
        this state directory, and are stopped if not: the server no longer counts them, so
        left running they would be orphans. Otherwise ``--stop-desktops-on-exit`` decides."""
        if not self.worker.replaced:
            return self.settings.stop_desktops_on_exit
        count = len(self.desktops.displays())
        if await asyncio.to_thread(self.owner.taken_by_another):
            log.info("the relay process that replaced this one took over %d desktop(s)", count)
            return False
        if count:
            log.warning(
                "stopping %d desktop(s): the relay that replaced this one runs with other "
                "state and does not have them",
                count,
            )
        return True
