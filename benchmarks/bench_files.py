"""Files through the server and the relay vs. the viewer tunnel's raw bytes, in one run.

A real server and relay (separate processes) and one 1280x800 desktop:

- (a) the viewer tunnel: full-screen Raw updates through the server's viewer WebSocket and a
  relay channel (``benchmarks/bench_viewer.py``'s path (b)), the baseline;
- (b) an upload of ``--size-mb`` (default 1024; 16 with ``--quick``) through
  ``POST …/files/…/upload``: the server, a relay channel, the child writing as the desktop's
  user;
- (c) the same file back through ``GET …/download``;
- (d) ``desktop_files_list`` of a folder of 1,000 files (p50 of 30; 10 with ``--quick``).

Reports MB/s of each, the server's and the relay's RSS growth during (b) and (c), and the
targets of docs/files.md: (b) and (c) >= 0.8 x (a); RSS growth <= 32 MB each; (d) <= 50 ms p50.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import psutil

from benchmarks.bench_viewer import DESKTOP_ENV, SERVER_ENV, desktop_record, person_viewer_path
from benchmarks.bench_viewer import throughput as tunnel_throughput
from benchmarks.common import parser, percentile
from benchmarks.rfb import RFBClient
from tests.support.processes import ProcessTracker
from tests.support.stack import (
    seed_database,
    start_relay,
    start_server,
    stop_desktops_in,
    wait_until,
)

PIECE = 1024 * 1024
MB = 1024 * 1024
LISTED = 1000


class Peak:
    """The largest RSS growth of some processes while it runs (sampled every 50 ms)."""

    def __init__(self, processes: dict[str, psutil.Process]) -> None:
        self.processes = processes
        self.base = {name: p.memory_info().rss for name, p in processes.items()}
        self.growth = dict.fromkeys(processes, 0)
        self._task: asyncio.Task[None] | None = None

    async def _sample(self) -> None:
        while True:
            for name, process in self.processes.items():
                grown = process.memory_info().rss - self.base[name]
                self.growth[name] = max(self.growth[name], grown)
            await asyncio.sleep(0.05)

    async def __aenter__(self) -> Peak:
        self._task = asyncio.create_task(self._sample())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


async def _pieces(count: int) -> AsyncIterator[bytes]:
    piece = hashlib.sha256(b"bench").digest() * (PIECE // 32)
    for _ in range(count):
        yield piece


async def run(quick: bool, size_mb: int | None) -> int:
    size_mb = size_mb or (16 if quick else 1024)
    seconds, lists = (0.5, 10) if quick else (3.0, 30)
    with tempfile.TemporaryDirectory(prefix="bench-files-") as tmp:
        tracker = ProcessTracker(Path(tmp) / "processes")
        try:
            seed = await seed_database(Path(tmp) / "data")
            server = await start_server(tracker.start, seed, env=SERVER_ENV)
            relay = start_relay(
                tracker.start,
                seed,
                server.url,
                env={**DESKTOP_ENV, "RELAYDESK_FILE_MAX_MB": str(size_mb + 1)},
            )
            await wait_until(lambda: server.relays_connected() == 1, 30, "the relay")
            headers = {"Authorization": f"Bearer {seed.api_token}"}
            cid = seed.conversation_id
            async with httpx.AsyncClient(base_url=server.url, timeout=600, headers=headers) as http:
                started = (
                    await http.post(
                        "/api/v1/actions/desktop_start",
                        json={"conversation_id": cid, "geometry": "1280x800"},
                    )
                ).json()
                session_id = started["desktop"]["desktop_session_id"]
                record = desktop_record(seed, session_id)
                home = Path(record["home"])
                url = f"ws://127.0.0.1:{server.port}{person_viewer_path(seed, session_id)}"
                viewer = await RFBClient.open_websocket(f"{url}websockify")
                await tunnel_throughput(viewer, 0.3)
                tunnel, _ = await tunnel_throughput(viewer, seconds)
                await viewer.close()
                processes = {
                    "server": psutil.Process(server.process.pid),
                    "relay": psutil.Process(relay.pid),
                }
                base = f"/api/v1/conversations/{cid}/files/relay-1/virtual/main"
                size = size_mb * PIECE
                async with Peak(processes) as up:
                    began = time.perf_counter()
                    answer = await http.post(
                        f"{base}/upload",
                        params={"path": "bench.bin"},
                        content=_pieces(size_mb),
                        headers={"Content-Length": str(size)},
                    )
                    upload = size / MB / (time.perf_counter() - began)
                assert answer.status_code == 200, answer.text
                async with Peak(processes) as down:
                    began = time.perf_counter()
                    got = 0
                    async with http.stream(
                        "GET", f"{base}/download", params={"path": "bench.bin"}
                    ) as response:
                        async for piece in response.aiter_bytes():
                            got += len(piece)
                    download = size / MB / (time.perf_counter() - began)
                assert got == size, got
                (home / "bench.bin").unlink()
                listing = _make_folder(home)
                times = []
                for _ in range(lists):
                    began = time.perf_counter()
                    listed = (
                        await http.post(
                            "/api/v1/actions/desktop_files_list",
                            json={"conversation_id": cid, "path": listing},
                        )
                    ).json()
                    times.append((time.perf_counter() - began) * 1000)
                assert len(listed["entries"]) == LISTED, listed
        finally:
            tracker.cleanup()
            await stop_desktops_in(Path(tmp) / "data" / "relay-state")
    report(tunnel, upload, download, up.growth, down.growth, times, size_mb)
    return 0


def _make_folder(home: Path) -> str:
    """A folder of LISTED small files in the home, owned by the home's user."""
    folder = home / "bench-listing"
    folder.mkdir()
    owner = home.stat()
    os.chown(folder, owner.st_uid, owner.st_gid)
    for index in range(LISTED):
        path = folder / f"file-{index:04d}.txt"
        path.write_bytes(b"x" * index)
        os.chown(path, owner.st_uid, owner.st_gid)
    return folder.name


def report(
    tunnel: float,
    upload: float,
    download: float,
    up: dict[str, int],
    down: dict[str, int],
    times: list[float],
    size_mb: int,
) -> None:
    p50 = percentile(times, 0.5)
    print(f"(a) viewer tunnel raw bytes : {tunnel:8.1f} MB/s")
    print(f"(b) upload {size_mb} MB        : {upload:8.1f} MB/s  ({upload / tunnel:.2f} x (a))")
    print(f"(c) download {size_mb} MB      : {download:8.1f} MB/s  ({download / tunnel:.2f} x (a))")
    print(
        f"RSS growth upload  : server {up['server'] / MB:.1f} MB, relay {up['relay'] / MB:.1f} MB"
    )
    print(
        f"RSS growth download: server {down['server'] / MB:.1f} MB, "
        f"relay {down['relay'] / MB:.1f} MB"
    )
    print(f"(d) list {LISTED} files: p50 {p50:.1f} ms  p99 {percentile(times, 0.99):.1f} ms")
    print(
        json.dumps(
            {
                "tunnel_mb_s": tunnel,
                "upload_mb_s": upload,
                "download_mb_s": download,
                "rss_growth_upload": up,
                "rss_growth_download": down,
                "list_p50_ms": p50,
                "size_mb": size_mb,
            }
        )
    )


def main() -> int:
    cli = parser(__doc__ or "")
    cli.add_argument("--size-mb", type=int, default=None, help="the file's size (MB)")
    args = cli.parse_args()
    os.environ.setdefault("RELAYDESK_LOG_LEVEL", "warning")
    result: Any = asyncio.run(run(args.quick, args.size_mb))
    return int(result)


if __name__ == "__main__":
    sys.exit(main())
