"""The audio capture runs as the desktop's user, inside its desktop's cgroup, never as the root
relay: the sound server's socket lies in a directory that user controls (docs/audio.md).

Real desktop with PulseAudio, a real root relay process, an in-process server."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import psutil
import pytest
import pytest_asyncio

from benchmarks.bench_audio import listener, tone
from tests.e2e.viewer_stack import ViewerStack, viewer_stack
from tests.support.processes import scaled
from tests.support.stack import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="desktop accounts need a root relay")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ViewerStack]:
    async with viewer_stack(tmp_path_factory.mktemp("audio-account")) as stack:
        yield stack


def _children(stack: ViewerStack, name: str) -> list[psutil.Process]:
    children = psutil.Process(stack.relay.pid).children(recursive=True)
    return [c for c in children if c.name() == name and c.status() != psutil.STATUS_ZOMBIE]


def _cgroup(pid: int) -> str:
    return Path(f"/proc/{pid}/cgroup").read_text(encoding="ascii").strip().split("::", 1)[-1]


@ROOT_ONLY
async def test_the_capture_runs_as_the_desktops_user_in_its_cgroup(stack: ViewerStack) -> None:
    desktop = await stack.start_desktop()
    url = stack.socket_url(desktop).removesuffix("websockify") + "audio"
    [pulse] = _children(stack, "pulseaudio")
    with tone(desktop.display, 5):
        async with listener(url) as ws:
            message = await asyncio.wait_for(ws.receive(), scaled(10))
            assert message.type == aiohttp.WSMsgType.BINARY, (ws.close_code, message.extra)
            [parec] = _children(stack, "parec")
            assert parec.uids().real != 0, "the root relay captures the desktop's sound as root"
            assert parec.uids() == pulse.uids() and parec.gids().real == pulse.gids().real
            assert _cgroup(parec.pid).endswith("/" + desktop.desktop_session_id)
            message = await asyncio.wait_for(ws.receive(), scaled(10))
            assert message.type == aiohttp.WSMsgType.BINARY, "the capture goes on"
    await wait_until(lambda: not _children(stack, "parec"), 5, "the capture to stop")
