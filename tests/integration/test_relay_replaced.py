"""A relay replaced by a newer connection never leaves orphaned desktops behind: the new relay
adopts them (same host, same state) or the old one stops them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.support.processes import ManagedProcess, ProcessFactory, scaled
from tests.support.stack import (
    QUICK_DESKTOPS,
    Seed,
    seed_action,
    start_relay,
    start_server,
    wait_until,
)

pytestmark = pytest.mark.integration

REPLACED_EXIT = 3


def _desktop_pids(state_dir: Path) -> list[int]:
    data = json.loads((state_dir / "desktops.json").read_text())
    return [int(p["pid"]) for d in data["desktops"] for p in d["processes"]]


def _alive(pids: list[int]) -> list[int]:
    return [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]


def _relay(
    factory: ProcessFactory, seed: Seed, url: str, name: str, state: Path, *args: str
) -> ManagedProcess:
    env = {**QUICK_DESKTOPS, "RELAYDESK_STATE_DIR": str(state)}
    return start_relay(factory, seed, url, name=name, env=env, extra_args=args)


async def _replace(
    factory: ProcessFactory, seed: Seed, first_args: tuple[str, ...], same_state: bool
) -> tuple[str, dict[str, Any], list[int], ManagedProcess]:
    server = await start_server(factory, seed)
    state = seed.data_dir / "relay-state"
    first = _relay(factory, seed, server.url, "first", state, *first_args)
    await first.wait_for_line_async("connected to", scaled(20))
    started = (await seed_action(server.url, seed, "desktop_start", slot="main"))["desktop"]
    pids = _desktop_pids(state)
    assert _alive(pids)
    other = state if same_state else seed.data_dir / "other-relay-state"
    second = _relay(factory, seed, server.url, "second", other, "--stop-desktops-on-exit")
    await second.wait_for_line_async("connected to", scaled(20))
    assert first.wait(scaled(20)) == REPLACED_EXIT, first.log_text()
    return server.url, started, pids, second


async def test_a_relay_replaced_from_elsewhere_stops_its_desktops(
    seed: Seed, process_factory: ProcessFactory
) -> None:
    url, started, pids, _second = await _replace(process_factory, seed, (), same_state=False)
    assert _alive(pids) == [], "the replaced relay's desktops must not outlive it"
    listed = await seed_action(url, seed, "desktop_list_active", probe=True)
    sessions = [row["desktop_session_id"] for row in listed["desktops"]]
    assert started["desktop_session_id"] not in sessions


async def test_a_relay_replaced_by_one_with_its_state_hands_its_desktops_over(
    seed: Seed, process_factory: ProcessFactory
) -> None:
    url, started, pids, second = await _replace(
        process_factory, seed, ("--stop-desktops-on-exit",), same_state=True
    )
    assert sorted(_alive(pids)) == sorted(pids), "the new relay adopted them: they keep running"
    listed = await seed_action(url, seed, "desktop_list_active", probe=True)
    (row,) = [
        r for r in listed["desktops"] if r["desktop_session_id"] == started["desktop_session_id"]
    ]
    assert row["state"] == "running"
    await wait_until(lambda: "re-adopted" in second.log_text(), 5, "the adoption log line")
