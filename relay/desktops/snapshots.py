"""``Snapshots``: save a running desktop of processes, start forks of it, reset one in place
(docs/desktops.md, "Snapshots and forks", "Reset").

A snapshot is the desktop's home (copied: ``snapshot_files.py``), its profile, geometry and
depth, the apps ``desktop.launch`` started in it, and the geometry of its apps' windows read
from X. A fork is a new desktop of the snapshot's profile and geometry whose home starts as a
copy of the snapshot's (``StartRequest.seed_home``); its start programs start as in any start,
the launched apps are launched again, and their windows are put back where they were once they
map (in the background: a fork answers as soon as it runs, like any start).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final

from relay.desktops.launcher import StartOptions
from relay.desktops.processes import ProcessDesktops
from relay.desktops.snapshot_files import SnapshotFiles, SnapshotMeta
from relay.desktops.state import Desktop
from relay.desktops.validation import StartRequest, check_session_id, check_slot
from relay.policy import DeniedApps
from wire.errors import ErrorCode, OpError, SessionConflict
from wire.ops import DesktopStartResult
from wire.snapshots import (
    DesktopForkArgs,
    DesktopForkResult,
    DesktopResetArgs,
    DesktopResetResult,
    DesktopSnapshotArgs,
    DesktopSnapshotResult,
    ForkFailure,
    SnapshotWindow,
)

logger = logging.getLogger(__name__)

# How long a fork's relaunched apps are given to map the windows that are put back.
WINDOWS_WAIT_S: Final = 30.0
WINDOWS_POLL_S: Final = 0.25


class Snapshots:
    """Snapshots of one relay's desktops of processes, and the desktops started from them."""

    def __init__(self, desktops: ProcessDesktops) -> None:
        self.desktops = desktops
        self.launcher = desktops.launcher
        config = desktops.config
        self.files = SnapshotFiles(config.state_dir, config.snapshot_max_mb)
        self._placing: set[asyncio.Task[None]] = set()

    async def snapshot(self, args: DesktopSnapshotArgs) -> DesktopSnapshotResult:
        """Save the exact running desktop as ``snapshot_id``."""
        desktop = self._exact(args["desktop_session_id"], args.get("slot"))
        if desktop.home is None:
            raise OpError(ErrorCode.UNAVAILABLE, "this desktop has no home of its own to save")
        self.files.path(args["snapshot_id"])  # the id is checked before anything is read
        windows = await self._windows(desktop)
        meta = SnapshotMeta(
            profile=desktop.profile,
            geometry=desktop.geometry,
            depth=desktop.depth,
            apps=list(self.launcher.launched.get(desktop.desktop_session_id, [])),
            windows=windows,
        )
        started = time.monotonic()
        meta = await asyncio.to_thread(
            self.files.save, args["snapshot_id"], Path(desktop.home), meta
        )
        logger.info(
            "snapshot of desktop slot=%s saved: %d KB in %.0f ms",
            desktop.slot,
            meta.size_bytes // 1024,
            (time.monotonic() - started) * 1000,
        )
        return {
            "snapshot_id": args["snapshot_id"],
            "profile": meta.profile,
            "geometry": meta.geometry,
            "depth": meta.depth,
            "apps": meta.apps,
            "windows": meta.windows,
            "size_bytes": meta.size_bytes,
        }

    async def delete(self, snapshot_id: str) -> bool:
        return await asyncio.to_thread(self.files.delete, snapshot_id)

    async def fork(self, args: DesktopForkArgs) -> DesktopForkResult:
        """One desktop per slot from the snapshot, started together."""
        snapshot_id = args["snapshot_id"]
        meta = await asyncio.to_thread(self.files.load, snapshot_id)
        slots = [check_slot(s) for s in args["slots"]]
        if not slots or len(set(slots)) != len(slots):
            raise OpError(ErrorCode.INVALID_ARGS, "slots: one distinct slot per desktop")
        reqs = [
            self._request(meta, snapshot_id, slot, args.get("started_by"), args.get("audio"))
            for slot in slots
        ]
        results = await self.desktops.start_many(reqs)
        started: list[DesktopStartResult] = []
        failed: list[ForkFailure] = []
        for slot, result in zip(slots, results, strict=True):
            if isinstance(result, Desktop):
                started.append({**result.to_row(), "already_running": False, "from_pool": False})
                self._restore(result, meta)
            elif isinstance(result, OpError):
                failed.append({"slot": slot, "code": result.code.value, "message": result.message})
            elif isinstance(result, Exception):
                logger.error("fork into slot=%s failed: %r", slot, result)
                failed.append({"slot": slot, "code": "start_failed", "message": str(result)})
            else:
                raise result
        return {"desktops": started, "failed": failed}

    async def reset(self, args: DesktopResetArgs) -> DesktopResetResult:
        """Replace the exact desktop in its slot by the snapshot's state, or by a fresh start
        of its profile (a ready desktop of the pool when one matches); the new desktop has a
        new session id."""
        desktop = self._exact(args["desktop_session_id"], args.get("slot"), paused_ok=True)
        snapshot_id = args.get("snapshot_id")
        started_by = args.get("started_by", desktop.started_by)
        if snapshot_id is not None:
            meta = await asyncio.to_thread(self.files.load, snapshot_id)
            req = self._request(meta, snapshot_id, desktop.slot, started_by, desktop.audio)
        else:
            meta = None
            options = StartOptions(
                desktop.kind,
                desktop.slot,
                desktop.geometry,
                desktop.depth,
                desktop.audio,
                started_by,
                None,
                desktop.profile,
                desktop.persist_home,
            )
            req = self.launcher.request(options)
        result, from_pool = await self.desktops.replace(req, desktop.desktop_session_id)
        if meta is not None:
            self._restore(result, meta)
        return {
            **result.to_row(),
            "already_running": False,
            "from_pool": from_pool,
            "replaced_session_id": desktop.desktop_session_id,
        }

    async def aclose(self) -> None:
        for task in list(self._placing):
            task.cancel()
        await asyncio.gather(*self._placing, return_exceptions=True)

    # -- internals ----------------------------------------------------------------------

    def _exact(self, session_id: str, slot: str | None, paused_ok: bool = False) -> Desktop:
        desktop = self.launcher.slots.by_session(check_session_id(session_id))
        if desktop is None:
            raise OpError(
                ErrorCode.NOT_RUNNING,
                "no running desktop has this desktop_session_id",
                {"field": "desktop_session_id"},
            )
        if slot is not None and check_slot(slot) != desktop.slot:
            if (current := self.launcher.slots.desktops.get(slot)) is not None:
                raise SessionConflict(current.desktop_session_id)
            raise OpError(
                ErrorCode.NOT_RUNNING, f"no desktop runs in slot {slot!r}", {"field": "slot"}
            )
        if desktop.state == "paused" and not paused_ok:
            raise OpError(
                ErrorCode.PAUSED,
                "this desktop is paused; resume it first (desktop_resume)",
                {"desktop_session_id": desktop.desktop_session_id},
            )
        return desktop

    def _request(
        self,
        meta: SnapshotMeta,
        snapshot_id: str,
        slot: str,
        started_by: str | None,
        audio: bool | None,
    ) -> StartRequest:
        options = StartOptions(
            "virtual", slot, meta.geometry, meta.depth, audio, started_by, None, meta.profile
        )
        req = self.launcher.request(options)
        return dataclasses.replace(req, seed_home=str(self.files.home(snapshot_id)))

    async def _windows(self, desktop: Desktop) -> list[SnapshotWindow]:
        """The windows of the desktop's apps (by WM_CLASS: its profile's apps and the relay's
        start programs), with their geometry."""
        from relay.desktop_tools.windows import list_windows

        windows, _active = await asyncio.to_thread(
            list_windows, f":{desktop.display}", DeniedApps()
        )
        apps = self._app_names(desktop)
        return [
            {"app": w["app"], "x": w["x"], "y": w["y"], "width": w["width"], "height": w["height"]}
            for w in windows
            if w["app"] in apps
        ]

    def _app_names(self, desktop: Desktop) -> set[str]:
        profile = self.launcher.profiles.get(desktop.profile or "")
        names = {a.id for a in profile.apps} if profile is not None else set()
        names.update(Path(words.split()[0]).name for words in self.launcher.config.apps if words)
        return names

    def _restore(self, desktop: Desktop, meta: SnapshotMeta) -> None:
        """Launch the snapshot's launched apps and put its windows back (in the background)."""
        task = asyncio.create_task(self._restoring(desktop, meta))
        self._placing.add(task)
        task.add_done_callback(self._placing.discard)

    async def _restoring(self, desktop: Desktop, meta: SnapshotMeta) -> None:
        session_id = desktop.desktop_session_id
        try:
            for app in meta.apps:
                await self.launcher.launch_app(session_id, desktop.slot, app)
            if meta.windows:
                await self._place(desktop, meta.windows)
        except Exception as err:
            if self.launcher.slots.by_session(session_id) is None:
                return  # stopped meanwhile: nothing left to restore
            if isinstance(err, OpError):
                logger.warning("slot=%s: apps not all restored: %s", desktop.slot, err.message)
            else:
                logger.exception("slot=%s: restoring its apps failed", desktop.slot)

    async def _place(self, desktop: Desktop, saved: Sequence[SnapshotWindow]) -> None:
        """Wait for each saved window's app to map one more window, and move and size it to
        the saved geometry (bounded by :data:`WINDOWS_WAIT_S`)."""
        from relay.desktop_tools.windows import apply, list_windows

        display = f":{desktop.display}"
        placed: set[int] = set()
        pending = list(saved)
        deadline = time.monotonic() + WINDOWS_WAIT_S
        while pending and time.monotonic() < deadline:
            if self.launcher.slots.by_session(desktop.desktop_session_id) is None:
                return
            windows, _active = await asyncio.to_thread(list_windows, display, DeniedApps())
            for want in list(pending):
                found = next(
                    (w for w in windows if w["app"] == want["app"] and w["id"] not in placed),
                    None,
                )
                if found is None:
                    continue
                placed.add(found["id"])
                pending.remove(want)
                now = (found["x"], found["y"], found["width"], found["height"])
                if now == (want["x"], want["y"], want["width"], want["height"]):
                    continue
                move = {"x": want["x"], "y": want["y"]}
                size = {"width": want["width"], "height": want["height"]}
                await asyncio.to_thread(apply, display, found["id"], "resize", size, DeniedApps())
                await asyncio.to_thread(apply, display, found["id"], "move", move, DeniedApps())
            if pending:
                await asyncio.sleep(WINDOWS_POLL_S)
        if pending:
            logger.info(
                "fork slot=%s: %d windows did not map in time to be put back",
                desktop.slot,
                len(pending),
            )
