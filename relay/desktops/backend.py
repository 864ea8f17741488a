"""``VirtualBackend``: the relay's desktops of processes (``ProcessDesktops``) as a
``DesktopBackend``.

Screen actions and the keyboard state run through the relay's :class:`ScreenService` on the
desktop's own display (one X connection per display; connections of displays whose desktops
are gone are released). A viewer's stream is the desktop's x11vnc on loopback, authenticated
with the desktop's VNC secret (``relay.vnc_target``).
"""

from __future__ import annotations

import asyncio
import base64
import signal
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from relay.a11y.client import A11yWorker, WorkerSpec
from relay.a11y.settings import A11ySettings
from relay.channels import ByteStream
from relay.desktops.a11y_workers import DesktopA11yWorkers
from relay.desktops.process import ChildProcess, pid_create_time
from relay.desktops.processes import ProcessDesktops
from relay.desktops.screens import DesktopScreens, SharedScreenService
from relay.desktops.snapshots import Snapshots
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

CONNECT_TIMEOUT_S = 5.0
LOOPBACK = "127.0.0.1"


class VirtualBackend:
    """Desktops the relay runs as processes on its host."""

    kind: DesktopKind = "virtual"

    def __init__(
        self,
        desktops: ProcessDesktops,
        screen: ScreenService | Callable[[], ScreenService] | None = None,
        *,
        missing: list[str] | None = None,
        a11y: A11ySettings | None = None,
    ) -> None:
        self.desktops = desktops
        self.processes = desktops.launcher
        self.a11y = a11y or A11ySettings()
        self._a11y_workers = DesktopA11yWorkers(self.a11y)
        # A service, or what hands out the relay's shared one; None: the first screen action
        # creates one, which this backend then closes.
        self._owned_screen: SharedScreenService | None = None
        if screen is None:
            screen = self._owned_screen = SharedScreenService()
        self._screen = screen
        # Programs a desktop needs that this host lacks: nothing starts while any is missing.
        self.missing = missing or []
        self._screens = DesktopScreens(lambda: self.screen_service, desktops.holds)
        # Snapshots of these desktops, forks and resets (relay/desktops/snapshots.py).
        self.snapshots = Snapshots(desktops)

    def capabilities(self) -> list[str]:
        if self.missing:
            return []
        available = [p["name"] for p in self.processes.profile_status() if p["available"]]
        return ["virtual_desktop", *(f"profile:{name}" for name in available)]

    def _runnable(self) -> ProcessDesktops:
        if self.missing:
            missing = ", ".join(self.missing)
            raise OpError(
                ErrorCode.UNAVAILABLE, f"this relay cannot run desktops; missing: {missing}"
            )
        return self.desktops

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self, args: DesktopStartArgs) -> DesktopStartResult:
        return await self._runnable().start(**args)

    async def stop(self, args: DesktopStopArgs) -> DesktopStopResult:
        return await self._runnable().stop(
            kind=args.get("kind", self.kind),
            slot=args.get("slot", "main"),
            desktop_session_id=args["desktop_session_id"],
        )

    async def pause(self, args: DesktopPauseArgs, paused: bool) -> RelayRow:
        change = self._runnable().pause if paused else self._runnable().resume
        return await change(
            kind=args.get("kind", self.kind),
            slot=args.get("slot", "main"),
            desktop_session_id=args["desktop_session_id"],
        )

    async def rows(self) -> list[RelayRow]:
        return await self.desktops.status()

    async def holds(self, desktop_session_id: str) -> bool:
        return self.desktops.holds(desktop_session_id)

    async def find(self, desktop_session_id: str | None, slot: str) -> RelayRow | None:
        row = await self.desktops.running(desktop_session_id, slot)
        await self._release_gone(self.desktops.displays())
        return row

    def direct(self, desktop_session_id: str) -> VncDirectResult | None:
        found = self.desktops.live(desktop_session_id)
        if found is None or found.vnc_secret is None:
            return None
        secret = base64.b64encode(found.vnc_secret).decode()
        return {"port": found.vnc_port, "secret": secret}

    # -- viewing and the screen --------------------------------------------------------------

    async def open_stream(self, row: RelayRow) -> ByteStream:
        secret = self.processes.vnc_secret(row["desktop_session_id"])
        if secret is None or "vnc_port" not in row:
            raise OpError(ErrorCode.NOT_RUNNING, "no running desktop has this session id")
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                return await VncTarget.open(LOOPBACK, row["vnc_port"], secret)
        except (OSError, TimeoutError, RfbHandshakeError) as err:
            raise OpError(
                ErrorCode.UNAVAILABLE, "the desktop's VNC server does not answer"
            ) from err

    @property
    def screen_service(self) -> ScreenService:
        screen = self._screen
        return screen() if callable(screen) else screen

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
            log_path = self.processes.config.log_dir / f"{desktop.kind}-{desktop.slot}.log"
            env = dict(desktop.session_env) | self.a11y.worker_env()
            return WorkerSpec(python, env, user, log_path)

        async def joined(pid: int) -> None:
            child = ChildProcess.adopt(
                "a11y-worker", pid, pid_create_time(pid) or 0.0, False, signal.SIGKILL
            )
            if not await self.processes.add_process(session_id, child):
                child.kill()

        return self._a11y_workers.add(session_id, f"desktop {row.get('slot', '?')}", spec, joined)

    async def _release_gone(self, live: set[str]) -> None:
        """Close screen connections of displays whose desktops are gone."""
        await self._a11y_workers.release_gone(self.desktops.holds)
        await self._screens.release_gone(live)

    # -- profiles and homes ------------------------------------------------------------------

    def profiles(self) -> list[ProfileInfo]:
        return self._runnable().launcher.profile_status()

    async def apps(self, desktop_session_id: str | None, slot: str) -> DesktopAppsResult:
        return await self._runnable().launcher.apps(desktop_session_id, slot)

    async def launch(
        self, desktop_session_id: str | None, slot: str, app: str
    ) -> DesktopLaunchResult:
        return await self._runnable().launcher.launch_app(desktop_session_id, slot, app)

    async def reset_home(self, slot: str) -> DesktopResetHomeResult:
        return await self._runnable().launcher.reset_home(slot)

    async def aclose(self) -> None:
        """Release the display connections this backend opened (if it owns its service)."""
        await self._a11y_workers.aclose()
        await self.snapshots.aclose()
        if self._owned_screen is not None:
            await self._owned_screen.aclose()
