"""``DockerDesktops``: the relay's container desktops (``kind: docker``), one per slot.

The contract is ``DesktopManager``'s (docs/desktops.md): start, status, the watchdog's teardown,
compare-and-stop, adoption and close run under one lock, so a session-id comparison and the stop
it guards are atomic against a racing restart; events are sent after the lock is released. A
desktop is a container of ``docker/desktop.Dockerfile`` that the relay reaches only through
sockets in the desktop's directory (docs/docker.md, "Desktops in containers").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any, Final

from relay.desktops.audio import REASON_FAILED
from relay.desktops.config import DesktopConfig
from relay.desktops.credentials import RelayAuthority
from relay.desktops.docker_config import DockerDesktopSettings, relay_key
from relay.desktops.docker_container import (
    LABEL_RELAY,
    LABEL_SESSION,
    ContainerDesktop,
    ContainerStateFile,
    StartingContainer,
    beat,
)
from relay.desktops.docker_engine import DockerEngine, DockerEngineError
from relay.desktops.docker_launch import ContainerLauncher, accepts, health
from relay.desktops.homes import Homes, remove_dirs
from relay.desktops.probe import PROBE_ERRORS
from relay.desktops.slots import now_iso
from relay.desktops.user import DesktopUser
from relay.desktops.validation import (
    StartRequest,
    check_session_id,
    check_slot,
    parse_start,
)
from relay.desktops.watchdog import ProbeStrikes, Watchdog
from wire.errors import ErrorCode, OpError
from wire.ids import DesktopSessionId

logger = logging.getLogger(__name__)

OnChange = Callable[[dict[str, Any]], Awaitable[None]]
Event = dict[str, Any]
# This kind's entries in the relay's X authority file.
AUTHORITY_SOURCE: Final = "docker"
STATE_FILE: Final = "docker-desktops.json"
MINIMAL: Final = "minimal"
NO_DAEMON: Final = "no Docker daemon answers on this relay's host"


class DockerDesktops:
    """Starts, watches, stops and re-adopts the relay's container desktops."""

    def __init__(
        self,
        config: DesktopConfig,
        settings: DockerDesktopSettings,
        *,
        authority: RelayAuthority,
        sound_root: Path | None = None,
        audio_default: bool = False,
        on_change: OnChange | None = None,
    ) -> None:
        self.config = config
        self.settings = settings
        self.authority = authority
        self.on_change = on_change
        self.engine = DockerEngine(settings.socket) if settings.socket is not None else None
        self.key = relay_key(config.state_dir)
        # What a start that does not say ``audio`` gets (as for virtual desktops).
        self._audio_default = audio_default and sound_root is not None
        self._sound_root = sound_root
        self._homes = Homes(config)
        self._state = ContainerStateFile(config.state_dir / STATE_FILE)
        self._desktops: dict[str, ContainerDesktop] = {}
        self._starting: dict[DesktopSessionId, StartingContainer] = {}
        self._lock = asyncio.Lock()
        self._watchdog = Watchdog(self.check_all, config.watchdog_interval_s)
        self._strikes = ProbeStrikes(config.probe_failures)
        # Why no desktop can start here (None: they can); asked again by a start.
        self.unavailable: str | None = "not probed yet"
        # The state file is written only once an adoption has read it.
        self._state_read = False
        self._cookies_written = False

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
            return ("this relay may not use the Docker daemon's socket (its user is not in the "
                    "docker group, which is as powerful as root)")  # fmt: skip
        try:
            await self.engine.version()
            if not await self.engine.has_image(self.settings.image):
                return (f"this relay's Docker has no desktop image {self.settings.image} "
                        "(scripts/docker-build desktop builds it)")  # fmt: skip
        except DockerEngineError as err:
            logger.info("docker desktops unavailable: %s", err)
            return NO_DAEMON
        return None

    # -- public operations ------------------------------------------------------------------

    async def start(
        self, *, slot: str = "main", geometry: str = "1280x800", depth: int = 24,
        audio: bool | None = None, started_by: str | None = None, apps: list[str] | None = None,
        profile: str | None = None, persist_home: bool = False,
    ) -> dict[str, Any]:  # fmt: skip
        """Start a desktop in the slot, or return the one already running there."""
        audio = self._audio_default if audio is None else audio
        req = parse_start(
            kind="virtual", slot=slot, geometry=geometry, depth=depth, audio=audio,
            started_by=started_by, apps=apps, default_apps=self.config.apps,
            allowed_apps=frozenset(self.config.allowed_apps), profile=profile,
            persist_home=persist_home,
        )  # fmt: skip
        _refuse_what_containers_lack(req)
        events: list[Event] = []
        try:
            async with self._lock:
                running = await self._running_in(req.slot, events)
                if running is not None:
                    return running.to_row() | {"already_running": True}
                engine = await self._check_can_start()
                desktop = await self._launch(engine, req)
                return desktop.to_row() | {"already_running": False}
        finally:
            await self._emit(events)

    async def status(self) -> list[dict[str, Any]]:
        """Rows of the live desktops; one whose container ended is failed first."""
        events: list[Event] = []
        try:
            async with self._lock:
                for desktop in list(self._desktops.values()):
                    await self._running_in(desktop.slot, events)
                return [d.to_row() for d in self._sorted()]
        finally:
            await self._emit(events)

    async def running(self, desktop_session_id: str | None, slot: str) -> dict[str, Any] | None:
        """The row of one live desktop: ``desktop_session_id``'s, else the slot's."""
        events: list[Event] = []
        try:
            async with self._lock:
                desktop = (self._desktops.get(slot) if desktop_session_id is None
                           else self.live(desktop_session_id))  # fmt: skip
                if desktop is None or not await self._running_in(desktop.slot, events):
                    return None
                return desktop.to_row()
        finally:
            await self._emit(events)

    def live(self, desktop_session_id: str) -> ContainerDesktop | None:
        """One live desktop, looked up without the lock (a stopping one is forgotten first)."""
        return next((d for d in self._desktops.values()
                     if d.desktop_session_id == desktop_session_id), None)  # fmt: skip

    def displays(self) -> set[str]:
        return {f":{d.display}" for d in self._desktops.values()}

    async def stop(self, *, slot: str, desktop_session_id: str) -> dict[str, Any]:
        """Compare-and-stop: remove the slot's container only if it still holds the session."""
        slot = check_slot(slot)
        session_id = check_session_id(desktop_session_id)
        async with self._lock:
            current = self._desktops.get(slot)
            if current is None:
                return {"stopped": False, "was_running": False}
            if current.desktop_session_id != session_id:
                logger.info("stop of docker slot %s refused: a newer session holds it", slot)
                return {"stopped": False, "conflict": True,
                        "current_session_id": current.desktop_session_id}  # fmt: skip
            await self._remove(current, "stopped")
            return {"stopped": True, "stopped_session_id": session_id}

    async def adopt(self) -> list[dict[str, Any]]:
        """Re-adopt the containers an earlier relay recorded that are still its own and pass
        the probe; remove the others, interrupted starts, and this relay's stray containers."""
        async with self._lock:
            adopted = await self._adopt_locked()
        return [d.to_row() for d in adopted]

    def start_watchdog(self) -> None:
        self._watchdog.start()

    async def close(self, stop_desktops: bool) -> None:
        """Stop the watchdog; remove every container too when asked, else leave them to the
        next relay process."""
        await self._watchdog.stop()
        async with self._lock:
            if stop_desktops:
                for desktop in self._sorted():
                    await self._remove(desktop, "relay closing", save=False)
            await self._save()
            if not self._desktops and self._state_read:
                await asyncio.to_thread(_remove_if_empty, self._root())
            self._desktops.clear()
            self._homes.release()
        if self.engine is not None:
            await self.engine.aclose()

    async def desktop_user(self) -> DesktopUser | None:
        """Who the containers' sessions run as (the relay's leased account; None: the relay)."""
        return await self._homes.desktop_user()

    async def check_all(self) -> None:
        """One watchdog round: the heartbeats, then a probe of every desktop (failed by the
        rule of ``ProbeStrikes``: an exited container at once, a silent one after
        ``probe_failures`` rounds in a row)."""
        snapshot = list(self._desktops.values())
        if not snapshot:
            return
        await asyncio.to_thread(_beat_all, [d.run_dir for d in snapshot])
        timeout = self.config.probe_timeout_s
        results = await asyncio.gather(*(health(d, timeout, retry=True) for d in snapshot))
        self._strikes.keep_only(d.desktop_session_id for d in snapshot)
        verdicts = [self._strikes.verdict(d.desktop_session_id, r)
                    for d, r in zip(snapshot, results, strict=True)]  # fmt: skip
        failed = [(d, why) for d, why in zip(snapshot, verdicts, strict=True) if why is not None]
        if failed:
            await self._fail_all(failed)
        gone = {id(desktop) for desktop, _ in failed}
        await self._check_sound([d for d in snapshot if d.audio and id(d) not in gone])

    # -- internals ------------------------------------------------------------------------

    def _sorted(self) -> list[ContainerDesktop]:
        return [self._desktops[slot] for slot in sorted(self._desktops)]

    def _root(self) -> Path:
        return self.settings.root(self.config.state_dir, os.geteuid() == 0)

    def _launcher(self, engine: DockerEngine) -> ContainerLauncher:
        return ContainerLauncher(self.config, self.settings, engine, self.key, self._sound_root)

    async def _check_can_start(self) -> DockerEngine:
        if len(self._desktops) >= self.config.max_desktops:
            raise OpError(ErrorCode.LIMIT_REACHED,
                          f"at most {self.config.max_desktops} docker desktops on this relay",
                          {"max_desktops": self.config.max_desktops})  # fmt: skip
        if self.unavailable is not None:
            await self.probe()
        if self.unavailable is not None or self.engine is None:
            raise OpError(ErrorCode.UNAVAILABLE, self.unavailable or NO_DAEMON, {"field": "kind"})
        if not self._state_read:
            await self._adopt_locked()
        return self.engine

    async def _launch(self, engine: DockerEngine, req: StartRequest) -> ContainerDesktop:
        session_id = DesktopSessionId(secrets.token_hex(16))
        user = await self._homes.desktop_user()
        run_dir = self._root() / session_id[:16]
        self._starting[session_id] = StartingContainer(session_id, req.slot, run_dir)
        await self._save()
        try:
            desktop = await self._launcher(engine).launch(req, session_id, run_dir, user)
        except BaseException:
            del self._starting[session_id]
            await asyncio.shield(self._save())
            raise
        del self._starting[session_id]
        self._desktops[desktop.slot] = desktop
        await self._save()
        return desktop

    async def _running_in(self, slot: str, events: list[Event]) -> ContainerDesktop | None:
        """The slot's desktop if its container runs; an ended one is failed here."""
        desktop = self._desktops.get(slot)
        if desktop is None:
            return None
        if not desktop.alive():
            await self._remove(desktop, "container exited")
            events.append(_failed(desktop, "container exited"))
            return None
        return desktop

    async def _fail_all(self, failed: Iterable[tuple[ContainerDesktop, str]]) -> None:
        events: list[Event] = []
        async with self._lock:
            for desktop, reason in failed:
                # A stop or restart may have replaced this incarnation while it was probed.
                if self._desktops.get(desktop.slot) is desktop:
                    await self._remove(desktop, reason, save=False)
                    events.append(_failed(desktop, reason))
            if events:
                await self._save()
        await self._emit(events)

    async def _check_sound(self, desktops: list[ContainerDesktop]) -> None:
        """Watchdog: a desktop whose sound server stopped answering keeps running, silent."""
        silent: list[ContainerDesktop] = []
        for desktop in desktops:
            try:
                await accepts(desktop.pulse_dir / "native", self.config.probe_timeout_s)
            except PROBE_ERRORS:
                silent.append(desktop)
        if not silent:
            return
        events: list[Event] = []
        async with self._lock:
            for desktop in silent:
                if self._desktops.get(desktop.slot) is desktop and desktop.audio:
                    desktop.audio, desktop.audio_reason = False, REASON_FAILED
                    logger.warning("docker desktop slot=%s lost its sound server", desktop.slot)
                    events.append(desktop.to_row() | {"reason": REASON_FAILED,
                                                      "updated_at": now_iso()})  # fmt: skip
            await self._save()
        await self._emit(events)

    async def _remove(self, desktop: ContainerDesktop, reason: str, save: bool = True) -> None:
        """Forget the desktop, then remove its container and files (caller holds the lock)."""
        self._desktops.pop(desktop.slot, None)
        desktop.state = "stopping"
        gone = True
        if self.engine is not None:
            gone = await self._launcher(self.engine).remove(desktop)
        desktop.state = "stopped" if reason == "stopped" else "failed"
        log = logger.info if reason in ("stopped", "relay closing") else logger.warning
        log("docker desktop %s slot=%s: %s%s", desktop.state, desktop.slot, reason,
            "" if gone else " (its container remains)")  # fmt: skip
        if save:
            await self._save()

    async def _save(self) -> None:
        """The state file and this kind's entries in the relay's X authority file."""
        # Containers run as the relay's desktop user too: while any does, the virtual
        # desktops' last stop leaves that account's processes alone (relay/desktops/slots.py).
        if running := bool(self._desktops or self._starting):
            await self._homes.desktop_user()
        self._homes.mark_busy(running)
        if not self._state_read:
            return
        desktops, starting = self._sorted(), list(self._starting.values())
        cookies = [(d.display, d.credentials.x_cookie) for d in desktops]
        try:
            # A relay that never ran a docker desktop writes neither file.
            recorded = await asyncio.to_thread(self._state.path.exists)
            if desktops or starting or recorded:
                await asyncio.to_thread(self._state.save, desktops, starting)
            if cookies or self._cookies_written:
                await asyncio.to_thread(self.authority.write, cookies, AUTHORITY_SOURCE)
                self._cookies_written = bool(cookies)
        except OSError as err:
            logger.error("cannot write the docker desktop state: %s", type(err).__name__)

    async def _emit(self, events: list[Event]) -> None:
        if self.on_change is None:
            return
        for event in events:
            try:
                await self.on_change(event)
            except Exception:
                logger.exception("desktop on_change callback failed")

    # -- adoption -------------------------------------------------------------------------

    async def _adopt_locked(self) -> list[ContainerDesktop]:
        if self.engine is None or self.unavailable == NO_DAEMON:
            return []  # nothing can be checked: the records wait for a relay that can
        engine = self.engine
        records, interrupted = await asyncio.to_thread(self._state.load)
        launcher = self._launcher(engine)
        for record in interrupted:
            try:
                starting = StartingContainer.from_record(record)
            except (KeyError, TypeError, ValueError):
                continue
            await launcher.remove_named(starting.desktop_session_id, starting.run_dir)
        adopted = [d for d in map(_parse, records)
                   if d is not None and await self._adopt_one(launcher, d)]  # fmt: skip
        await self._remove_strays(engine, {d.container_id for d in adopted})
        self._state_read = True
        await self._save()
        keep = {DesktopSessionId(d.run_dir.name) for d in adopted}
        await asyncio.to_thread(remove_dirs, self._root(), keep)
        if adopted:
            logger.info("re-adopted %d docker desktop(s)", len(adopted))
        return adopted

    async def _adopt_one(self, launcher: ContainerLauncher, desktop: ContainerDesktop) -> bool:
        try:
            info = await launcher.engine.inspect(desktop.container_id)
        except DockerEngineError:
            info = None
        ours = _still_ours(info, desktop, self.key)
        refused = desktop.slot in self._desktops or len(self._desktops) >= self.config.max_desktops
        result = None
        if ours and not refused:
            await asyncio.to_thread(beat, desktop.run_dir)
            await asyncio.to_thread(_reclaim_display, desktop)
            result = await health(desktop, self.config.probe_timeout_s, retry=True)
        if result is not None and result.ok:
            self._desktops[desktop.slot] = desktop
            logger.info("re-adopted docker desktop slot=%s", desktop.slot)
            return True
        why = "slot taken or limit" if refused else (result.reason if result else "not ours")
        logger.info("not re-adopting docker desktop slot=%s: %s", desktop.slot, why)
        await launcher.remove(desktop)
        return False

    async def _remove_strays(self, engine: DockerEngine, keep: set[str]) -> None:
        """Containers labelled with this relay's key that no record keeps (a relay killed
        between creating one and recording it)."""
        try:
            found = await engine.labelled({LABEL_RELAY: self.key})
        except DockerEngineError as err:
            logger.warning("cannot list this relay's containers: %s", err)
            return
        for container in found:
            container_id = str(container.get("Id", ""))
            if container_id and container_id not in keep:
                logger.info("removing stray desktop container %s", container_id[:12])
                await self._launcher(engine).remove_container(container_id)


def _refuse_what_containers_lack(req: StartRequest) -> None:
    if req.profile not in (None, MINIMAL):
        raise OpError(ErrorCode.UNAVAILABLE, "docker desktops run the window manager and the "
                      "start-up apps only (profile minimal)", {"field": "profile"})  # fmt: skip
    if req.persist_home:
        raise OpError(ErrorCode.UNAVAILABLE, "docker desktops keep no home between sessions",
                      {"field": "persist_home"})  # fmt: skip


def _failed(desktop: ContainerDesktop, reason: str) -> Event:
    return desktop.to_row() | {"state": "failed", "reason": reason, "updated_at": now_iso()}


def _parse(record: dict[str, Any]) -> ContainerDesktop | None:
    try:
        return ContainerDesktop.from_record(record)
    except (KeyError, TypeError, ValueError) as err:
        logger.warning("skipping malformed docker desktop record: %s", type(err).__name__)
        return None


def _still_ours(info: dict[str, Any] | None, desktop: ContainerDesktop, key: str) -> bool:
    """The recorded container runs, is this relay's and this session's, with the same init."""
    if info is None:
        return False
    labels = (info.get("Config") or {}).get("Labels") or {}
    state = info.get("State") or {}
    return (
        bool(state.get("Running")) and state.get("Pid") == desktop.init_pid
        and labels.get(LABEL_RELAY) == key
        and labels.get(LABEL_SESSION) == desktop.desktop_session_id
        and desktop.alive()
    )  # fmt: skip


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
