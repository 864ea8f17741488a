"""``DesktopManager``: the relay's virtual desktops, one per (kind, slot).

Start, status, the watchdog's teardown and compare-and-stop all run under one lock, so the
session-id comparison and the stop it guards are atomic against a racing restart of the slot.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import shutil
import sys
from collections.abc import Awaitable, Callable, Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp

from relay.desktops.audio import (
    PROCESS_NAME as PULSEAUDIO,
)
from relay.desktops.audio import (
    REASON_FAILED,
    audio_lost,
    audio_outcome,
    runtime_dir,
    stale_runtime_dirs,
)
from relay.desktops.config import DesktopConfig
from relay.desktops.credentials import PRIVATE_FILE_MODE, RelayAuthority, private_dir
from relay.desktops.guard import GuardArgs
from relay.desktops.launch import (
    AudioStarter,
    LaunchedDesktop,
    Launcher,
    SessionSetup,
    missing_binaries,
)
from relay.desktops.probe import ProbeResult, probe_chain
from relay.desktops.process import ChildProcess, DesktopProcesses
from relay.desktops.profiles import Profile, choose, load_profiles
from relay.desktops.state import Desktop, StartingDesktop, StateFile
from relay.desktops.user import (
    DesktopUser,
    directory_size,
    homes_root,
    prepare_home,
    resolve_desktop_user,
)
from relay.desktops.validation import (
    StartRequest,
    check_session_id,
    check_slot,
    normalise_kind,
    parse_start,
)
from relay.desktops.watchdog import Watchdog
from wire.errors import ErrorCode, OpError
from wire.ids import DesktopSessionId

logger = logging.getLogger(__name__)

OnChange = Callable[[dict[str, Any]], Awaitable[None]]
Event = dict[str, Any]


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _failed_event(desktop: Desktop, reason: str) -> Event:
    return desktop.to_row() | {"state": "failed", "reason": reason, "updated_at": _now_iso()}


class DesktopManager:
    """Starts, watches, stops and re-adopts the relay's virtual desktops."""

    def __init__(
        self,
        config: DesktopConfig | None = None,
        *,
        on_change: OnChange | None = None,
        audio: AudioStarter | None = None,
        audio_default: bool = False,
    ) -> None:
        self.config = config or DesktopConfig.from_env()
        self.on_change = on_change
        self._audio = audio
        # What a start that does not say ``audio`` gets (relay/desktops/audio.py: AudioMode).
        self._audio_default = audio_default and audio is not None
        self._desktops: dict[tuple[str, str], Desktop] = {}
        # Starts in progress, recorded in the state file child by child.
        self._starting: dict[DesktopSessionId, StartingDesktop] = {}
        self._lock = asyncio.Lock()
        self._state = StateFile(self.config.state_file)
        self.authority = RelayAuthority(self.config.authority_file)
        secure_state_dir(self.config)
        self._http: aiohttp.ClientSession | None = None
        self._watchdog = Watchdog(self.check_all, self.config.watchdog_interval_s)
        self.profiles = load_profiles(self.config.profiles_dir)
        self._user: DesktopUser | None = None
        self._user_resolved = False

    # -- public operations --------------------------------------------------------------

    async def start(
        self,
        *,
        kind: str = "virtual",
        slot: str = "main",
        geometry: str = "1280x800",
        depth: int = 24,
        audio: bool | None = None,
        started_by: str | None = None,
        apps: list[str] | None = None,
        profile: str | None = None,
        persist_home: bool = False,
    ) -> dict[str, Any]:
        """Start a desktop in the slot, or return the one already running there."""
        audio = self._audio_default if audio is None else audio
        req = parse_start(
            kind=kind, slot=slot, geometry=geometry, depth=depth, audio=audio,
            started_by=started_by, apps=apps, default_apps=self.config.apps,
            allowed_apps=frozenset(self.config.allowed_apps),
            profile=profile if profile is not None else self.config.default_profile,
            persist_home=persist_home,
        )  # fmt: skip
        events: list[Event] = []
        try:
            async with self._lock:
                running = await self._running_in(req.kind, req.slot, events)
                if running is not None:
                    return running.to_row() | {"already_running": True}
                chosen = self._check_can_start(req)
                desktop = await self._launch(req, chosen)
                return desktop.to_row() | {"already_running": False}
        finally:
            await self._emit(events)

    async def status(self) -> list[dict[str, Any]]:
        """Rows of the live desktops; ones whose essential processes died are failed first."""
        events: list[Event] = []
        try:
            async with self._lock:
                for desktop in list(self._desktops.values()):
                    if await self._running_in(desktop.kind, desktop.slot, events):
                        self._note_audio_lost(desktop, events)
                return [d.to_row() for d in self._sorted()]
        finally:
            await self._emit(events)

    async def running(
        self, desktop_session_id: str | None, default: tuple[str, str]
    ) -> dict[str, Any] | None:
        """The row of one live desktop: ``desktop_session_id``'s, or the ``default`` (kind,
        slot)'s when None. Only its processes are checked (a dead one is failed here, as in
        :meth:`status`): an action on one desktop does not poll every other desktop's."""
        events: list[Event] = []
        try:
            async with self._lock:
                if desktop_session_id is None:
                    desktop = self._desktops.get(default)
                else:
                    desktop = next(
                        (d for d in self._desktops.values()
                         if d.desktop_session_id == desktop_session_id),
                        None,
                    )  # fmt: skip
                if desktop is None or not await self._running_in(*desktop.key, events):
                    return None
                self._note_audio_lost(desktop, events)
                return desktop.to_row()
        finally:
            await self._emit(events)

    def live(self, desktop_session_id: str) -> Desktop | None:
        """One of this relay's desktops, looked up without the lock (a desktop being stopped
        is forgotten first, so this does not wait for its stop)."""
        return next((d for d in self._desktops.values()
                     if d.desktop_session_id == desktop_session_id), None)  # fmt: skip

    def holds(self, desktop_session_id: str) -> bool:
        """Whether ``desktop_session_id`` is one of this relay's desktops (without the lock)."""
        return self.live(desktop_session_id) is not None

    def vnc_secret(self, desktop_session_id: str) -> bytes | None:
        """The VNC secret of a live desktop (None: no such desktop), for whoever connects to
        its x11vnc on the relay's behalf (the relay's channels, a co-located server)."""
        desktop = self.live(desktop_session_id)
        return desktop.vnc_secret if desktop is not None else None

    def displays(self) -> set[str]:
        """The displays of the desktops this relay runs (as rows name them, ``:N``)."""
        return {f":{desktop.display}" for desktop in self._desktops.values()}

    async def stop(self, *, kind: str, slot: str, desktop_session_id: str) -> dict[str, Any]:
        """Compare-and-stop: stop the slot only if it still holds ``desktop_session_id``."""
        key = (normalise_kind(kind), check_slot(slot))
        session_id = check_session_id(desktop_session_id)
        async with self._lock:
            current = self._desktops.get(key)
            if current is None:
                return {"stopped": False, "was_running": False}
            if current.desktop_session_id != session_id:
                logger.info("stop of slot %s refused: a newer session holds it", key[1])
                return {
                    "stopped": False,
                    "conflict": True,
                    "current_session_id": current.desktop_session_id,
                }
            await self._remove(current, "stopped")
            return {"stopped": True, "stopped_session_id": session_id}

    async def probe(self, kind: str, slot: str) -> dict[str, Any]:
        """Probe one slot end to end (processes, ``vnc.html``, RFB through websockify)."""
        desktop = self._desktops.get((normalise_kind(kind), check_slot(slot)))
        if desktop is None:
            return {"kind": kind, "slot": slot, "running": False, "ok": False,
                    "reason": "not_running"}  # fmt: skip
        result = await self._health(desktop)
        return {
            "kind": desktop.kind,
            "slot": desktop.slot,
            "running": True,
            "desktop_session_id": desktop.desktop_session_id,
            **result.to_dict(),
        }

    def profile_status(self) -> list[dict[str, Any]]:
        """Every profile of this relay: available, or which programs it misses."""
        return [p.status() | {"default": name == self.config.default_profile}
                for name, p in sorted(self.profiles.items())]  # fmt: skip

    async def apps(
        self, desktop_session_id: str | None, default: tuple[str, str]
    ) -> dict[str, Any]:
        """The launchable apps of one running desktop's profile."""
        desktop = self._find(desktop_session_id, default)
        profile = self.profiles.get(desktop.profile or "")
        launchable = [a.to_dict() for a in profile.apps] if profile is not None else []
        return {"desktop_session_id": desktop.desktop_session_id, "profile": desktop.profile,
                "launchable": launchable}  # fmt: skip

    async def launch_app(
        self, desktop_session_id: str | None, default: tuple[str, str], app: object
    ) -> dict[str, Any]:
        """Start one of the profile's launchable apps in a running desktop, as its session's
        user; it joins the desktop's processes and stops with it."""
        async with self._lock:
            desktop = self._find(desktop_session_id, default)
            profile = self.profiles.get(desktop.profile or "")
            if profile is None or desktop.home is None:
                raise OpError(ErrorCode.UNAVAILABLE, "this desktop has no profile to launch from")
            entry = profile.app(app)
            argv = profile.expand(entry.exec, Path(desktop.home))
            user = await self.desktop_user()
            log = _open_append(self.config.log_dir / f"{desktop.kind}-{desktop.slot}.log")
            try:
                child = ChildProcess.spawn(
                    f"app:{entry.id}", argv, env=desktop.session_env | dict(entry.env),
                    essential=False, output=log, user=user,
                )  # fmt: skip
            except OSError as err:
                raise OpError(ErrorCode.START_FAILED, f"{entry.id} did not start: {err}") from err
            finally:
                log.close()
            desktop.processes.add(child)
            await self._save()
        logger.info("launched %s in desktop slot=%s", entry.id, desktop.slot)
        return {"desktop_session_id": desktop.desktop_session_id, "app": entry.id,
                "launched": True}  # fmt: skip

    async def reset_home(self, *, kind: str, slot: str) -> dict[str, Any]:
        """Wipe the kept home of a slot; refused while a desktop runs there."""
        key = (normalise_kind(kind), check_slot(slot))
        async with self._lock:
            if (running := self._desktops.get(key)) is not None:
                raise OpError(
                    ErrorCode.BUSY,
                    "a desktop runs in this slot; stop it before resetting its home",
                    {"current_session_id": running.desktop_session_id},
                )  # fmt: skip
            await self.desktop_user()
            home = self._home_of(*key, "", persist=True)
            existed = home.is_dir()
            await asyncio.to_thread(shutil.rmtree, home, True)
        logger.info("kept home of slot=%s reset (existed: %s)", key[1], existed)
        return {"kind": key[0], "slot": key[1], "reset": True, "existed": existed}

    def _find(self, desktop_session_id: str | None, default: tuple[str, str]) -> Desktop:
        if desktop_session_id is None:
            desktop = self._desktops.get(default)
        else:
            desktop = next((d for d in self._desktops.values()
                            if d.desktop_session_id == desktop_session_id), None)  # fmt: skip
        if desktop is None:
            raise OpError(ErrorCode.NOT_RUNNING, "no running desktop there; start one first")
        return desktop

    async def adopt_from_state(self) -> list[dict[str, Any]]:
        """Re-adopt desktops of an earlier relay that still pass the probe; clean up the rest."""
        records = await asyncio.to_thread(self._state.load)
        interrupted = await asyncio.to_thread(self._state.load_starting)
        adopted: list[Desktop] = []
        async with self._lock:
            await asyncio.to_thread(self._beat)
            for record in interrupted:
                await self._remove_interrupted(record)
            for record in records:
                desktop = self._parse_record(record)
                if desktop is not None and await self._adopt_one(desktop):
                    adopted.append(desktop)
            await self._save()
            keep = {d.desktop_session_id for d in adopted}
            await asyncio.to_thread(_remove_private_dirs, self.config, keep)
            if adopted or records or interrupted:
                await self.desktop_user()
                await asyncio.to_thread(_remove_dirs, self._homes() / "sessions", keep)
            if self._audio is not None:
                await asyncio.to_thread(_remove_stale_runtime_dirs, self._audio.runtime_root)
        return [d.to_row() for d in adopted]

    def start_watchdog(self) -> None:
        """Begin periodic health checks (idempotent)."""
        self._watchdog.start()

    async def close(self, stop_desktops: bool) -> None:
        """Stop the watchdog; stop every desktop too when asked, else leave them for adoption."""
        await self._watchdog.stop()
        async with self._lock:
            if stop_desktops:
                for desktop in self._sorted():
                    await self._remove(desktop, "relay closing", save=False)
            await self._save()
            self._desktops.clear()
        if self._http is not None:
            await self._http.close()
            self._http = None

    async def check_all(self) -> None:
        """One watchdog round: beat the heartbeat, probe every desktop, tear down failures."""
        await asyncio.to_thread(self._beat)
        snapshot = list(self._desktops.values())
        if not snapshot:
            return
        results = await asyncio.gather(*(self._health(d, retry=True) for d in snapshot))
        pairs = zip(snapshot, results, strict=True)
        failed = [(d, r.reason or "unhealthy") for d, r in pairs if not r.ok]
        if failed:
            await self._fail_all(failed)
        if any(d.audio and audio_lost(d.processes) for d in snapshot):
            await self._audio_lost()

    # -- internals ----------------------------------------------------------------------

    @property
    def http(self) -> aiohttp.ClientSession:
        # Connections are not reused: websockify forks a worker per connection.
        if self._http is None or self._http.closed:
            self._http = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(force_close=True), trust_env=False
            )
        return self._http

    def _sorted(self) -> list[Desktop]:
        return [self._desktops[k] for k in sorted(self._desktops)]

    def _check_can_start(self, req: StartRequest) -> Profile:
        if len(self._desktops) >= self.config.max_desktops:
            raise OpError(
                ErrorCode.LIMIT_REACHED,
                f"at most {self.config.max_desktops} desktops on this relay",
                {"max_desktops": self.config.max_desktops},
            )
        if missing := missing_binaries(self.config):
            raise OpError(ErrorCode.UNAVAILABLE, f"missing: {', '.join(missing)}")
        return choose(self.profiles, req.profile)

    async def desktop_user(self) -> DesktopUser | None:
        """Who desktops run as (None: as the relay); created on first use when root."""
        if not self._user_resolved:
            self._user = await asyncio.to_thread(resolve_desktop_user, self.config.desktop_user)
            self._user_resolved = True
        return self._user

    def _homes(self) -> Path:
        return homes_root(self.config.state_dir, self.config.homes_dir, self._user)

    def _home_of(self, kind: str, slot: str, session_id: str, persist: bool) -> Path:
        if persist:
            return self._homes() / "persistent" / f"{kind}-{slot}"
        return self._homes() / "sessions" / session_id

    async def _session(self, req: StartRequest, profile: Profile, session_id: str) -> SessionSetup:
        user = await self.desktop_user()
        home = self._home_of(req.kind, req.slot, session_id, req.persist_home)
        if req.persist_home and home.is_dir():
            size = await asyncio.to_thread(directory_size, home)
            limit = self.config.home_max_mb * 1024 * 1024
            if size > limit:
                raise OpError(
                    ErrorCode.LIMIT_REACHED,
                    f"the kept home of slot {req.slot!r} holds {size // 2**20} MB, more than "
                    f"{self.config.home_max_mb} MB; wipe it with desktop_reset_home",
                    {"field": "persist_home", "size_mb": size // 2**20},
                )
        await asyncio.to_thread(prepare_home, home, user, fresh=not req.persist_home)
        return SessionSetup(profile, home, user)

    async def _launch(self, req: StartRequest, profile: Profile) -> Desktop:
        session_id = DesktopSessionId(secrets.token_hex(16))
        launcher = Launcher(self.config, self.http, self._audio)
        private = self.config.run_dir / session_id
        procs = DesktopProcesses(on_add=self._record_spawn)
        self._starting[session_id] = StartingDesktop(session_id, req.kind, req.slot, procs)
        session: SessionSetup | None = None
        try:
            await asyncio.to_thread(self._beat)
            session = await self._session(req, profile, session_id)
            self._spawn_guard(req, session_id, procs)
            launched = await launcher.launch(req, f"{req.kind}-{req.slot}", private, procs, session)
        except BaseException:
            home = session.home if session is not None and not req.persist_home else None
            await asyncio.shield(self._abandon_start(session_id, private, home))
            raise
        del self._starting[session_id]
        desktop = self._desktop_from(req, session_id, launched)
        desktop.profile, desktop.persist_home = profile.name, req.persist_home
        desktop.home = str(session.home)
        desktop.session_env = launched.session_env
        self._desktops[desktop.key] = desktop
        await self._save()
        logger.info(
            "desktop started kind=%s slot=%s display=:%d", req.kind, req.slot, launched.display
        )
        return desktop

    async def _abandon_start(
        self, session_id: DesktopSessionId, private: Path, home: Path | None
    ) -> None:
        """A start failed or was cancelled: stop what it spawned, forget its record."""
        starting = self._starting.pop(session_id, None)
        if starting is not None:
            await starting.processes.stop(self.config.stop_grace_s)
        await asyncio.to_thread(shutil.rmtree, private, True)
        if home is not None:
            await asyncio.to_thread(shutil.rmtree, home, True)
        await self._save()

    def _record_spawn(self, child: ChildProcess) -> None:
        """Write the state file at once, before the start spawns anything else (blocking, on
        purpose: a relay killed in the next instant must still find this child)."""
        logger.debug("recording %s pid=%d of a starting desktop", child.name, child.pid)
        try:
            self._state.save(self._sorted(), list(self._starting.values()))
        except OSError as err:
            logger.error("cannot write desktop state file: %s", type(err).__name__)

    def _spawn_guard(
        self, req: StartRequest, session_id: DesktopSessionId, procs: DesktopProcesses
    ) -> None:
        """The desktop's orphan guard (relay/desktops/guard.py), its first child."""
        if self.config.orphan_timeout_s <= 0:
            return
        args = GuardArgs(
            session_id, self.config.state_file, self.config.heartbeat_file,
            self.config.orphan_timeout_s, self.config.run_dir / session_id,
            self._audio.runtime_root if self._audio is not None else None,
        )  # fmt: skip
        argv = [sys.executable, "-m", "relay.desktops.guard", *args.argv()]
        log = _open_guard_log(self.config.log_dir / f"{req.kind}-{req.slot}.guard.log")
        try:
            procs.add(ChildProcess.spawn(GUARD, argv, env=_guard_env(), essential=False,
                                         output=log))  # fmt: skip
        except OSError as err:
            logger.warning("desktop %s runs without an orphan guard: %s", req.slot, err)
        finally:
            log.close()

    def _beat(self) -> None:
        """Tell the desktops' orphan guards this relay is alive (blocking)."""
        path = self.config.heartbeat_file
        try:
            path.touch(mode=PRIVATE_FILE_MODE)
            os.utime(path)
        except OSError as err:
            logger.error("cannot touch the relay heartbeat file: %s", type(err).__name__)

    def _desktop_from(
        self, req: StartRequest, session_id: DesktopSessionId, launched: LaunchedDesktop
    ) -> Desktop:
        # No sound server is no reason to refuse a desktop: the row says why it is silent.
        audio_reason = audio_outcome(req.audio, self._audio is not None, launched.extra_env)
        return Desktop(
            desktop_session_id=session_id, kind=req.kind, slot=req.slot,
            geometry=req.geometry, depth=req.depth, display=launched.display,
            started_at=_now_iso(), started_by=req.started_by,
            websockify_port=launched.websockify_port, vnc_port=launched.vnc_port,
            audio=audio_reason is None, processes=launched.processes,
            dbus_address=launched.dbus_address, audio_reason=audio_reason,
            credentials=launched.credentials,
        )  # fmt: skip

    async def _running_in(self, kind: str, slot: str, events: list[Event]) -> Desktop | None:
        """The slot's desktop if its essential processes run; a dead one is failed here."""
        desktop = self._desktops.get((kind, slot))
        if desktop is None:
            return None
        if dead := desktop.processes.dead_essentials():
            reason = f"process exited: {', '.join(dead)}"
            await self._remove(desktop, reason)
            events.append(_failed_event(desktop, reason))
            return None
        return desktop

    async def _health(self, desktop: Desktop, retry: bool = False) -> ProbeResult:
        """Essential processes first (cheap), then the end-to-end chain."""
        if dead := desktop.processes.dead_essentials():
            reason = f"process exited: {', '.join(dead)}"
            return ProbeResult(ok=False, reason=reason, checks={"processes": False})
        timeout = self.config.probe_timeout_s
        result = await probe_chain(self.http, desktop.websockify_port, timeout)
        if not result.ok and retry and not desktop.processes.dead_essentials():
            # One immediate second look: a single slow answer must not kill a healthy desktop.
            result = await probe_chain(self.http, desktop.websockify_port, timeout)
        result.checks = {"processes": True, **result.checks}
        return result

    async def _audio_lost(self) -> None:
        """Watchdog: desktops whose sound server died keep running, without audio."""
        events: list[Event] = []
        async with self._lock:
            for desktop in list(self._desktops.values()):
                self._note_audio_lost(desktop, events)
            if events:
                await self._save()
        await self._emit(events)

    def _note_audio_lost(self, desktop: Desktop, events: list[Event]) -> None:
        if desktop.audio and audio_lost(desktop.processes):
            desktop.audio, desktop.audio_reason = False, REASON_FAILED
            logger.warning("desktop slot=%s lost its sound server", desktop.slot)
            events.append(desktop.to_row() | {"reason": REASON_FAILED, "updated_at": _now_iso()})

    async def _fail_all(self, failed: Iterable[tuple[Desktop, str]]) -> None:
        events: list[Event] = []
        async with self._lock:
            for desktop, reason in failed:
                # A stop or restart may have replaced this incarnation while it was probed.
                if self._desktops.get(desktop.key) is desktop:
                    await self._remove(desktop, reason, save=False)
                    events.append(_failed_event(desktop, reason))
            if events:
                await self._save()
        await self._emit(events)

    async def _remove(self, desktop: Desktop, reason: str, save: bool = True) -> None:
        """Forget the desktop and stop its whole process set (caller holds the lock)."""
        self._desktops.pop(desktop.key, None)
        desktop.state = "stopping"
        clean = await self._stop_processes(desktop)
        private = self.config.run_dir / desktop.desktop_session_id
        await asyncio.to_thread(shutil.rmtree, private, True)
        if desktop.home is not None and not desktop.persist_home:
            await asyncio.to_thread(shutil.rmtree, desktop.home, True)
        desktop.state = "stopped" if reason == "stopped" else "failed"
        log = logger.info if reason in ("stopped", "relay closing") else logger.warning
        log(
            "desktop %s kind=%s slot=%s: %s%s",
            desktop.state, desktop.kind, desktop.slot, reason,
            "" if clean else " (some processes remain)",
        )  # fmt: skip
        if save:
            await self._save()

    def _parse_record(self, record: dict[str, Any]) -> Desktop | None:
        try:
            return Desktop.from_record(record)
        except (KeyError, TypeError, ValueError) as err:
            logger.warning("skipping malformed desktop record: %s", type(err).__name__)
            return None

    async def _adopt_one(self, desktop: Desktop) -> bool:
        clash = desktop.key in self._desktops
        full = len(self._desktops) >= self.config.max_desktops
        # A desktop started without credentials is open to every local user: never kept.
        open_to_all = desktop.credentials is None
        refused = clash or full or open_to_all
        result = await self._health(desktop) if not refused else None
        if result is not None and result.ok:
            self._desktops[desktop.key] = desktop
            logger.info("re-adopted desktop kind=%s slot=%s", desktop.kind, desktop.slot)
            return True
        reason = (
            "slot taken" if clash else "limit" if full
            else "no credentials" if open_to_all else (result and result.reason)
        )  # fmt: skip
        logger.info("not re-adopting desktop slot=%s: %s", desktop.slot, reason)
        await self._stop_processes(desktop)
        return False

    async def _stop_processes(self, desktop: Desktop) -> bool:
        """Stop a desktop's groups; its sound directory goes first, while the desktop still
        holds its display number (afterwards another desktop may take number and directory)."""
        if self._audio is not None and desktop.processes.find(PULSEAUDIO) is not None:
            directory = runtime_dir(desktop.display, self._audio.runtime_root)
            await asyncio.to_thread(shutil.rmtree, directory, True)
        return await desktop.processes.stop(self.config.stop_grace_s)

    async def _remove_interrupted(self, record: dict[str, Any]) -> None:
        """Stop what a start the last relay did not finish spawned (only groups still its own)."""
        try:
            starting = StartingDesktop.from_record(record)
        except (KeyError, TypeError, ValueError) as err:
            logger.warning("skipping malformed record of a start: %s", type(err).__name__)
            return
        clean = await starting.processes.stop(self.config.stop_grace_s)
        logger.info(
            "removed an interrupted start of slot=%s (%d processes)%s", starting.slot,
            len(starting.processes.children), "" if clean else " (some processes remain)",
        )  # fmt: skip

    async def _save(self) -> None:
        """The state file and the relay's authority file, after every change of desktops."""
        desktops = self._sorted()
        cookies = [(d.display, d.credentials.x_cookie) for d in desktops if d.credentials]
        starting = list(self._starting.values())
        try:
            await asyncio.to_thread(self._state.save, desktops, starting)
        except OSError as err:
            # Desktops keep running; only re-adoption after a restart is at risk.
            logger.error("cannot write desktop state file: %s", type(err).__name__)
        try:
            await asyncio.to_thread(self.authority.write, cookies)
        except OSError as err:
            # The desktops run; the relay's own screen actions on a new one would be refused.
            logger.error("cannot write the relay's X authority file: %s", type(err).__name__)

    async def _emit(self, events: list[Event]) -> None:
        if self.on_change is None:
            return
        for event in events:
            try:
                await self.on_change(event)
            except Exception:
                logger.exception("desktop on_change callback failed")


def secure_state_dir(config: DesktopConfig) -> None:
    """Make the state, log and run directories 0700 and earlier desktop logs 0600."""
    for directory in (config.state_dir, config.log_dir, config.run_dir):
        private_dir(directory)
    for log in config.log_dir.glob("*.log"):
        log.chmod(PRIVATE_FILE_MODE)


def _remove_private_dirs(config: DesktopConfig, keep: set[DesktopSessionId]) -> None:
    """Private directories of desktops this relay no longer runs (blocking)."""
    _remove_dirs(config.run_dir, keep)


def _remove_dirs(parent: Path, keep: set[DesktopSessionId]) -> None:
    if not parent.is_dir():
        return
    for path in parent.iterdir():
        if path.is_dir() and path.name not in keep:
            shutil.rmtree(path, ignore_errors=True)


GUARD = "guard"


def _guard_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "PYTHONPATH", "TZ")}


def _open_append(path: Path) -> Any:
    private_dir(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, PRIVATE_FILE_MODE)
    return os.fdopen(fd, "ab")


def _open_guard_log(path: Path) -> Any:
    private_dir(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE_MODE)
    return os.fdopen(fd, "wb")


def _remove_stale_runtime_dirs(root: Path) -> None:
    """Sound directories of displays no X server holds (a start interrupted by a kill)."""
    for directory in stale_runtime_dirs(root):
        shutil.rmtree(directory, ignore_errors=True)
