"""A server, a real relay and desktops started directly on it, each with an X event recorder
covering its screen: for the tests that check exactly what input reached a desktop (the screen
tool, pixels, Cua's protocol)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.processes import ProcessTracker, scaled
from tests.support.stack import Seed, inprocess_server, seed_database, start_relay, wait_until
from tests.support.xrecorder import XRecorder
from wire.ids import RelayId


@dataclass
class Desktop:
    session_id: str
    display: str
    width: int
    height: int
    recorder: XRecorder
    stopped: bool = False


async def start_desktop(app: Any, relay_id: str, slot: str, size: tuple[int, int]) -> Desktop:
    """A virtual desktop in ``slot`` started through the relay's op, with a recorder on it."""
    args = {"kind": "virtual", "slot": slot, "geometry": f"{size[0]}x{size[1]}"}
    row = await app.state.parts.relays.request(RelayId(relay_id), "desktop.start", args, scaled(30))
    recorder = XRecorder(row["display"], scaled(10))
    return Desktop(row["desktop_session_id"], row["display"], *size, recorder)


@contextlib.asynccontextmanager
async def recorded_desktops(
    root: Path, sizes: Mapping[str, tuple[int, int]]
) -> AsyncIterator[tuple[Any, str, Seed, str, dict[str, Desktop]]]:
    """``(app, url, seed, relay_id, {slot: desktop})``; the relay stops its desktops on exit."""
    seed = await seed_database(root / "data")
    tracker = ProcessTracker(root / "processes")
    env = {"RELAYDESK_DESKTOP_APPS": ",", "DISPLAY": ""}
    async with inprocess_server(seed) as (app, url):
        relay = start_relay(
            tracker.start, seed, url, env=env, extra_args=("--stop-desktops-on-exit",)
        )
        relay_id = seed.relay["relay_id"]
        try:
            connected = app.state.parts.relays.is_connected
            await wait_until(lambda: connected(RelayId(relay_id)), 20, "the relay to connect")
            desktops = {
                slot: await start_desktop(app, relay_id, slot, size) for slot, size in sizes.items()
            }
            yield app, url, seed, relay_id, desktops
            for desktop in desktops.values():
                if not desktop.stopped:
                    desktop.recorder.stop()
        except BaseException:
            print(relay.log_tail())
            raise
        finally:
            # Off the loop: the relay's close handshake needs this process's server.
            await asyncio.to_thread(tracker.cleanup)
