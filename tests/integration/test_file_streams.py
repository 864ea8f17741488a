"""Uploads and downloads as byte streams through a real server and a real relay into a real
desktop's home (docs/files.md).

A 1 GB file (``BIG_MB``) goes up and comes back identical while the relay's
and the server's memory stay flat (the server runs in this process: its RSS is this process's,
with the client's; both only ever hold a piece at a time). An upload cut midway keeps what
arrived and resumes from there; refusals are the home file actions' (``path_outside_home``,
the control gate, the roles); bad input names its field.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import stat
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
import pytest_asyncio

from server import admin
from tests.e2e.viewer_stack import Desktop, ViewerStack, viewer_stack
from tests.support.processes import scaled

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

BIG_MB = 1024
PIECE = 1024 * 1024
RSS_GROWTH_MAX = 32 * 1024 * 1024


@dataclass
class Files:
    stack: ViewerStack
    desktop: Desktop
    reader: str

    @property
    def base(self) -> str:
        cid = self.stack.seed.conversation_id
        return f"{self.stack.url}/api/v1/conversations/{cid}/files/relay-1/virtual/main"

    def headers(self, token: str | None = None) -> dict[str, str]:
        return {"Authorization": f"Bearer {token or self.stack.seed.api_token}"}

    def home(self) -> Path:
        state = self.stack.seed.data_dir / "relay-state" / "desktops.json"
        data = json.loads(state.read_text(encoding="utf-8"))
        (found,) = [
            d
            for d in data["desktops"]
            if d["desktop_session_id"] == self.desktop.desktop_session_id
        ]
        return Path(found["home"])

    async def upload(
        self,
        path: str,
        content: Any,
        length: int | None = None,
        token: str | None = None,
        **query: Any,
    ) -> httpx.Response:
        headers = self.headers(token)
        if length is not None:
            headers["Content-Length"] = str(length)
        async with httpx.AsyncClient(timeout=scaled(300)) as client:
            return await client.post(
                f"{self.base}/upload",
                params={"path": path, **query},
                content=content,
                headers=headers,
            )


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def files(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Files]:
    env = {"RELAYDESK_FILE_MAX_MB": "2048"}
    async with viewer_stack(tmp_path_factory.mktemp("file-streams"), relay_env=env) as stack:
        desktop = await stack.start_desktop("main")
        store = stack.app.state.parts.store
        user = await admin.create_user(store, "stream-reader")
        await store.add_member(stack.seed.conversation_id, user["user_id"], "read")
        reader = (await admin.create_token(store, "stream-reader"))["token"]
        yield Files(stack, desktop, reader)


def _piece(index: int) -> bytes:
    """Piece ``index`` of the big file: not compressible, the same every time."""
    return hashlib.sha256(index.to_bytes(8, "big")).digest() * (PIECE // 32)


async def _pieces(first: int, last: int, cut_at: int | None = None) -> AsyncIterator[bytes]:
    for index in range(first, last):
        if index == cut_at:
            raise ConnectionAbortedError("cut on purpose")
        yield _piece(index)


class Peak:
    """The largest RSS growth of some processes while it runs (sampled)."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.processes = {name: psutil.Process(pid) for name, pid in pids.items()}
        self.base = {name: p.memory_info().rss for name, p in self.processes.items()}
        self.growth = dict.fromkeys(pids, 0)
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


def _sha(pieces: Callable[[], Any]) -> str:
    digest = hashlib.sha256()
    for piece in pieces():
        digest.update(piece)
    return digest.hexdigest()


async def test_a_large_file_goes_up_and_down_identical_with_flat_memory(files: Files) -> None:
    size = BIG_MB * PIECE
    expected = _sha(lambda: (_piece(i) for i in range(BIG_MB)))
    pids = {"server": os.getpid(), "relay": files.stack.relay.pid}
    async with Peak(pids) as up:
        answer = await files.upload("Downloads/big.bin", _pieces(0, BIG_MB), size)
    assert answer.status_code == 200, answer.text
    assert (answer.json()["path"], answer.json()["size"]) == ("Downloads/big.bin", size)
    on_disk = files.home() / "Downloads" / "big.bin"
    info = on_disk.stat()
    assert info.st_size == size and info.st_uid == files.home().stat().st_uid
    assert stat.S_IMODE(info.st_mode) & 0o022 == 0
    with on_disk.open("rb") as handle:
        assert await asyncio.to_thread(_sha, lambda: iter(lambda: handle.read(PIECE), b"")) == (
            expected
        )
    digest = hashlib.sha256()
    async with Peak(pids) as down, httpx.AsyncClient(timeout=scaled(300)) as client:
        params = {"path": "~/Downloads/big.bin"}
        async with client.stream(
            "GET", f"{files.base}/download", params=params, headers=files.headers()
        ) as response:
            assert response.status_code == 200
            assert response.headers["content-length"] == str(size)
            async for piece in response.aiter_bytes():
                digest.update(piece)
    assert digest.hexdigest() == expected
    for name in pids:
        assert up.growth[name] <= RSS_GROWTH_MAX, (name, up.growth)
        assert down.growth[name] <= RSS_GROWTH_MAX, (name, down.growth)
    print(f"RSS growth (bytes): upload {up.growth}, download {down.growth}")
    on_disk.unlink()


async def test_a_cut_upload_resumes_from_what_arrived(files: Files) -> None:
    total = 64
    with pytest.raises(ConnectionAbortedError):
        await files.upload("Downloads/resumed.bin", _pieces(0, total, cut_at=20), total * PIECE)
    async with httpx.AsyncClient(timeout=scaled(60)) as client:
        held = await client.get(
            f"{files.base}/upload",
            params={"path": "Downloads/resumed.bin"},
            headers=files.headers(),
        )
    assert held.status_code == 200, held.text
    offset = int(held.json()["offset"])
    assert 0 < offset <= 20 * PIECE, offset
    assert not (files.home() / "Downloads" / "resumed.bin").exists()
    wrong = await files.upload("Downloads/resumed.bin", b"x", 1, offset=offset + 1)
    assert (wrong.status_code, wrong.json()["error"]["code"]) == (409, "offset_mismatch")

    async def rest() -> AsyncIterator[bytes]:
        whole = b"".join(_piece(i) for i in range(offset // PIECE, offset // PIECE + 1))
        yield whole[offset % PIECE :]
        async for piece in _pieces(offset // PIECE + 1, total):
            yield piece

    done = await files.upload(
        "Downloads/resumed.bin", rest(), total * PIECE - offset, offset=offset
    )
    assert done.status_code == 200, done.text
    on_disk = files.home() / "Downloads" / "resumed.bin"
    with on_disk.open("rb") as handle:
        got = await asyncio.to_thread(_sha, lambda: iter(lambda: handle.read(PIECE), b""))
    assert got == _sha(lambda: (_piece(i) for i in range(total)))
    assert not [p for p in on_disk.parent.iterdir() if p.name.endswith(".relaydesk-part")]


async def test_a_name_that_exists_gets_a_renamed_copy_unless_asked(files: Files) -> None:
    home = files.home()
    assert (await files.upload("report.txt", b"first", 5)).json()["path"] == "report.txt"
    second = await files.upload("report.txt", b"second", 6)
    assert second.json()["path"] == "report (1).txt"
    refused = await files.upload("report.txt", b"third", 5, exists="refuse")
    assert (refused.status_code, refused.json()["error"]["code"]) == (400, "invalid_args")
    replaced = await files.upload("report.txt", b"fourth", 6, exists="replace")
    assert replaced.json()["path"] == "report.txt"
    assert (home / "report.txt").read_bytes() == b"fourth"
    assert (home / "report (1).txt").read_bytes() == b"second"


async def test_escapes_are_refused_and_nothing_moves(files: Files) -> None:
    home = files.home()
    (home / "passwd").symlink_to("/etc/passwd")
    try:
        async with httpx.AsyncClient(timeout=scaled(60)) as client:
            for path in ("/etc/passwd", "../x", "passwd"):
                got = await client.get(
                    f"{files.base}/download", params={"path": path}, headers=files.headers()
                )
                assert (got.status_code, got.json()["error"]["code"]) == (
                    403,
                    "path_outside_home",
                ), (path, got.text)
        for path in ("../escape.txt", "/tmp/escape.txt", "passwd"):
            got = await files.upload(path, b"owned", 5, exists="replace")
            assert (got.status_code, got.json()["error"]["code"]) == (403, "path_outside_home")
        assert not Path("/tmp/escape.txt").exists()
        assert not (home.parent / "escape.txt").exists()
        assert os.readlink(home / "passwd") == "/etc/passwd"
    finally:
        (home / "passwd").unlink()


async def test_a_read_member_downloads_but_never_uploads(files: Files) -> None:
    await files.upload("shared.txt", b"for all", 7)
    async with httpx.AsyncClient(timeout=scaled(60)) as client:
        got = await client.get(
            f"{files.base}/download",
            params={"path": "shared.txt"},
            headers=files.headers(files.reader),
        )
    assert (got.status_code, got.content) == (200, b"for all")
    refused = await files.upload("shared.txt", b"mine", 4, token=files.reader, exists="replace")
    assert (refused.status_code, refused.json()["error"]["code"]) == (403, "forbidden")
    assert (files.home() / "shared.txt").read_bytes() == b"for all"
    # Hidden files (where apps keep keys and sessions) are not a read member's to download.
    await files.upload(".keys/secret", b"the key", 7)
    async with httpx.AsyncClient(timeout=scaled(60)) as client:
        hidden = await client.get(
            f"{files.base}/download",
            params={"path": ".keys/secret"},
            headers=files.headers(files.reader),
        )
    assert (hidden.status_code, hidden.json()["error"]["code"]) == (403, "forbidden")
    assert b"the key" not in hidden.content


async def test_a_persons_takeover_refuses_an_agents_upload(files: Files) -> None:
    await files.stack.action("desktop_take_control", person=True, slot="main")
    try:
        got = await files.upload("held.txt", b"agent", 5)
        assert (got.status_code, got.json()["error"]["code"]) == (423, "takeover_active")
    finally:
        await files.stack.action("desktop_hand_back", person=True, slot="main")
    assert not (files.home() / "held.txt").exists()


@pytest.mark.parametrize(
    ("method", "query", "field", "status"),
    [
        ("GET", {}, "path", 400),
        ("GET", {"path": "a", "offset": "-1"}, "offset", 400),
        ("GET", {"path": "a", "offset": "x"}, "offset", 400),
        ("POST", {"path": "a", "exists": "maybe"}, "exists", 400),
        ("POST", {"path": "a\u0000"}, "path", 400),
        ("POST", {}, "path", 400),
    ],
)
async def test_bad_input_names_the_field(
    files: Files, method: str, query: dict[str, str], field: str, status: int
) -> None:
    url = f"{files.base}/{'download' if method == 'GET' else 'upload'}"
    async with httpx.AsyncClient(timeout=scaled(60)) as client:
        got = await client.request(
            method,
            url,
            params=query,
            headers=files.headers(),
            content=b"x" if method == "POST" else None,
        )
    assert got.status_code == status, got.text
    assert got.json()["error"]["code"] == "invalid_args", got.text
    assert field in got.text


async def test_an_upload_without_its_length_is_refused(files: Files) -> None:
    async def chunked() -> AsyncIterator[bytes]:
        yield b"no length"

    got = await files.upload("nolength.txt", chunked())
    assert got.status_code == 411 and "Content-Length" in got.text, got.text
    assert not (files.home() / "nolength.txt").exists()


# -- relaydesk files put|get|ls ----------------------------------------------------------------


async def _cli(files: Files, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "RELAYDESK_API_TOKEN": files.stack.seed.api_token,
        "RELAYDESK_SERVER_URL": files.stack.url,
        "RELAYDESK_CONVERSATION_ID": files.stack.seed.conversation_id,
    }
    argv = [sys.executable, "-m", "relaydesk", "files", *args]
    return await asyncio.to_thread(
        subprocess.run,
        argv,
        env=env,
        capture_output=True,
        text=True,
        timeout=scaled(120),
        check=False,
    )


async def test_the_cli_puts_lists_and_gets_with_a_progress_bar(
    files: Files, tmp_path: Path
) -> None:
    local = tmp_path / "notes.bin"
    local.write_bytes(b"".join(_piece(i) for i in range(3)))
    put = await _cli(files, "put", str(local), "cli/notes.bin")
    assert put.returncode == 0, put.stderr
    assert "100.0%" in put.stderr and "3.0/3.0 MB" in put.stderr, put.stderr
    assert (files.home() / "cli" / "notes.bin").read_bytes() == local.read_bytes()
    listed = await _cli(files, "ls", "cli", "--json")
    assert listed.returncode == 0, listed.stderr
    (entry,) = json.loads(listed.stdout)["entries"]
    assert (entry["name"], entry["size"]) == ("notes.bin", 3 * PIECE)
    back = tmp_path / "back.bin"
    got = await _cli(files, "get", "cli/notes.bin", str(back))
    assert got.returncode == 0 and "100.0%" in got.stderr, got.stderr
    assert back.read_bytes() == local.read_bytes()
    again = await _cli(files, "put", str(local), "cli/notes.bin", "--json", "--relay", "relay-1")
    assert json.loads(again.stdout)["path"] == "cli/notes (1).bin"
    refused = await _cli(files, "get", "/etc/passwd", str(tmp_path / "passwd"))
    assert refused.returncode == 1 and "path_outside_home" in refused.stderr, refused.stderr
