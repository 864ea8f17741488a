"""``DockerBackend``: the relay's container desktops (``ContainerDesktops``) as a
``DesktopBackend``.

Everything a viewer, the screen tool and the accessibility tools need reaches the container
through the sockets of the desktop's directory: the viewer's stream is x11vnc's unix socket
(authenticated with the desktop's VNC secret, ``relay.vnc_target``), screen actions and the
keyboard state open the display ``:N`` the relay linked on its host (``docker/display.py``), the
accessibility worker the session bus. Launchable apps, kept homes, the direct path and the
desktop tools (shell, files, windows, clipboard) are not offered for containers.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from relay.a11y.client import A11yWorker, WorkerSpec
from relay.a11y.settings import A11ySettings
from relay.backend import not_offered
from relay.channels import ByteStream
from relay.desktops.a11y_workers import DesktopA11yWorkers
from relay.desktops.docker.launcher import ContainerDesktops
from relay.desktops.screens import DesktopScreens
from relay.vnc_target import VncTarget
from wire.errors import ErrorCode, OpError, RfbHandshakeError
from wire.ops import (
    DesktopAppsResult,
    DesktopKind,
    DesktopLaunchResult,
    DesktopPauseArgs,
    DesktopResetHomeResult,
    DesktopStartArgs,
    DesktopStartResult,
    DesktopStopArgs,
    DesktopStopResult,
    KeyboardState,
    ProfileInfo,
    RelayRow,
    ScreenResult,
    VncDirectResult,
)
from wire.screen_actions import ScreenAction

if TYPE_CHECKING:
    from relay.screen.service import ScreenService

CONNECT_TIMEOUT_S: Final = 5.0
CAPABILITY: Final = "docker_desktop"
_KEPT_ENV: Final = ("PATH", "LANG", "LANGUAGE", "TZ")


class DockerBackend:
    """Desktops in containers, reached through sockets in a directory shared with each."""

    kind: DesktopKind = "docker"

    def __init__(
        self,
        desktops: ContainerDesktops,
        screen: Callable[[], ScreenService],
        *,
        a11y: A11ySettings | None = None,
    ) -> None:
        self.desktops = desktops
        self.a11y = a11y or A11ySettings()
        self._a11y_workers = DesktopA11yWorkers(self.a11y)
        # The relay's screen service, shared with its other backends (made on first use).
        self._screens = DesktopScreens(screen, lambda session: desktops.live(session) is not None)

    def capabilities(self) -> list[str]:
        return [CAPABILITY] if self.desktops.launcher.unavailable is None else []

    async def open(self) -> None:
        """At relay start, before the server connects: is Docker there, and re-adoption."""
        await self.desktops.launcher.probe()
        await self.desktops.adopt()
        self.desktops.start_watchdog()

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self, args: DesktopStartArgs) -> DesktopStartResult:
        return await self.desktops.start(**args)

    async def stop(self, args: DesktopStopArgs) -> DesktopStopResult:
        result = await self.desktops.stop(
            slot=args.get("slot", "main"), desktop_session_id=args["desktop_session_id"]
        )
        await self._release_gone()
        return result

    async def pause(self, args: DesktopPauseArgs, paused: bool) -> RelayRow:
        change = self.desktops.pause if paused else self.desktops.resume
        return await change(
            kind=args.get("kind", self.kind),
            slot=args.get("slot", "main"),
            desktop_session_id=args["desktop_session_id"],
        )

    async def rows(self) -> list[RelayRow]:
        rows = await self.desktops.status()
        await self._release_gone()
        return rows

    async def holds(self, desktop_session_id: str) -> bool:
        return self.desktops.live(desktop_session_id) is not None

    async def find(self, desktop_session_id: str | None, slot: str) -> RelayRow | None:
        row = await self.desktops.running(desktop_session_id, slot)
        await self._release_gone()
        return row

    def direct(self, desktop_session_id: str) -> VncDirectResult | None:
        return None  # x11vnc listens on no port: the server cannot reach it itself

    # -- viewing and the screen --------------------------------------------------------------

    async def open_stream(self, row: RelayRow) -> ByteStream:
        desktop = self.desktops.live(row["desktop_session_id"])
        if desktop is None:
            raise OpError(ErrorCode.NOT_RUNNING, "no running desktop has this session id")
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                return await VncTarget.open_unix(
                    str(desktop.vnc_socket), desktop.credentials.vnc_secret
                )
        except (OSError, TimeoutError, RfbHandshakeError) as err:
            raise OpError(
                ErrorCode.UNAVAILABLE, "the desktop's VNC server does not answer"
            ) from err

    async def screen(
        self, row: RelayRow, action: ScreenAction, args: dict[str, Any]
    ) -> ScreenResult:
        return await self._screens.screen(row, action, args)

    async def keyboard_state(self, row: RelayRow) -> KeyboardState:
        return await self._screens.keyboard_state(row)

    async def release_held(self, row: RelayRow) -> bool:
        return await self._screens.release_held(row)

    # -- accessibility ----------------------------------------------------------------------

    async def a11y_worker(self, row: RelayRow) -> A11yWorker:
        """The desktop's accessibility worker: a process on the relay's host, as the user the
        container runs as (its session bus admits only that user), reaching the session bus
        and the accessibility bus through the desktop's directory."""
        session_id = row["desktop_session_id"]
        worker = self._a11y_workers.get(session_id)
        if worker is not None:
            return worker
        python = await self._a11y_workers.python()
        user = await self.desktops.desktop_user()

        def spec() -> WorkerSpec:
            desktop = self.desktops.live(session_id)
            if desktop is None:
                raise OpError(ErrorCode.NOT_RUNNING, "the desktop stopped")
            inherited = {k: v for k, v in os.environ.items() if k in _KEPT_ENV}
            env = inherited | desktop.session_env() | self.a11y.worker_env()
            return WorkerSpec(python, env, user, None)

        return self._a11y_workers.add(session_id, f"docker desktop {row.get('slot', '?')}", spec)

    async def _release_gone(self) -> None:
        """Close the screen connections and accessibility workers of desktops that are gone."""
        await self._a11y_workers.release_gone(lambda s: self.desktops.live(s) is not None)
        await self._screens.release_gone(self.desktops.displays())

    # -- what containers do not offer ------------------------------------------------------------

    def profiles(self) -> list[ProfileInfo]:
        return []

    async def apps(self, desktop_session_id: str | None, slot: str) -> DesktopAppsResult:
        raise not_offered(self.kind, "launchable apps (they run their start-up apps only)")

    async def launch(
        self, desktop_session_id: str | None, slot: str, app: str
    ) -> DesktopLaunchResult:
        raise not_offered(self.kind, "launchable apps (they run their start-up apps only)")

    async def reset_home(self, slot: str) -> DesktopResetHomeResult:
        raise not_offered(self.kind, "kept homes")

    async def aclose(self) -> None:
        """Stop the accessibility workers (the screen service belongs to the relay)."""
        await self._a11y_workers.aclose()
