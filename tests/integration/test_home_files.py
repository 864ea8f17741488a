"""Files in a desktop's home through the typed actions, on real desktops: a real server, a real
relay started *without* the shell opt-in, and two real desktops (slots ``main`` and ``other``).

What the actions did is read from the file system (owner, mode, bytes), never from the actions
under test. The escapes — ``..``, absolute paths, ``~user``, a symbolic link to ``/etc/passwd``
and one to the other desktop's home, a FIFO, a device — are refused with ``403
path_outside_home`` and nothing outside the home is read or written. A person's takeover
refuses an agent's write and delete, Stop too; a ``read`` member lists and reads, never writes.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio

from server import admin
from server.actions.desktop_files import path_hash
from tests.e2e.viewer_stack import Desktop, ViewerStack, viewer_stack
from tests.support.processes import scaled
from tests.support.stack import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

FILE_MAX_MB = 0.5
OUTSIDE = "path_outside_home"


@dataclass
class Homes:
    stack: ViewerStack
    main: Desktop
    other: Desktop
    reader: str  # a read member's API token

    def record(self, desktop: Desktop) -> dict[str, Any] | None:
        """The relay's state record of ``desktop`` (None once it has stopped)."""
        state = self.stack.seed.data_dir / "relay-state" / "desktops.json"
        data = json.loads(state.read_text(encoding="utf-8"))
        found = [
            d for d in data["desktops"] if d["desktop_session_id"] == desktop.desktop_session_id
        ]
        return found[0] if found else None

    def home(self, desktop: Desktop) -> Path:
        found = self.record(desktop)
        assert found is not None
        return Path(found["home"])

    def processes(self, desktop: Desktop, name: str) -> list[int]:
        """The pids of the desktop's processes called ``name`` (as the relay recorded them)."""
        found = self.record(desktop)
        processes = found["processes"] if found else []
        return [int(p["pid"]) for p in processes if p["name"] == name]

    async def act(
        self, name: str, desktop: Desktop | None = None, token: str | None = None, **args: Any
    ) -> tuple[int, dict[str, Any]]:
        desktop = desktop or self.main
        body = {"conversation_id": self.stack.seed.conversation_id, "slot": desktop.slot, **args}
        headers = {"Authorization": f"Bearer {token or self.stack.seed.api_token}"}
        async with httpx.AsyncClient(base_url=self.stack.url, timeout=scaled(60)) as client:
            response = await client.post(f"/api/v1/actions/{name}", json=body, headers=headers)
        return response.status_code, response.json()

    async def ok(self, name: str, desktop: Desktop | None = None, **args: Any) -> dict[str, Any]:
        status, body = await self.act(name, desktop, **args)
        assert status == 200, (name, body)
        return body

    async def refused(self, name: str, desktop: Desktop | None = None, **args: Any) -> str:
        """The error code of a refused call (its status checked against the code's)."""
        status, body = await self.act(name, desktop, **args)
        assert status != 200 and body["ok"] is False, (name, body)
        code = str(body["error"]["code"])
        expected = {
            OUTSIDE: 403,
            "file_too_large": 413,
            "invalid_args": 400,
            "takeover_active": 423,
            "forbidden": 403,
            "not_found": 404,
        }
        assert status == expected.get(code, status), (name, body)
        return code


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def homes(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Homes]:
    env = {"RELAYDESK_FILE_MAX_MB": str(FILE_MAX_MB)}
    async with viewer_stack(tmp_path_factory.mktemp("home-files"), relay_env=env) as stack:
        main = await stack.start_desktop("main")
        other = await stack.start_desktop("other")
        store = stack.app.state.parts.store
        user = await admin.create_user(store, "files-reader")
        await store.add_member(stack.seed.conversation_id, user["user_id"], "read")
        reader = (await admin.create_token(store, "files-reader"))["token"]
        yield Homes(stack, main, other, reader)


def _digest(path: Path) -> tuple[str, float]:
    return hashlib.sha256(path.read_bytes()).hexdigest(), path.stat().st_mtime


async def test_an_agent_writes_lists_reads_and_deletes_as_the_desktops_user(homes: Homes) -> None:
    home = homes.home(homes.main)
    owner = home.stat().st_uid
    written = await homes.ok(
        "desktop_file_write", path="Downloads/report.txt", content="héllo\nwörld\n"
    )
    assert (written["path"], written["size"]) == ("Downloads/report.txt", 14)
    on_disk = home / "Downloads" / "report.txt"
    assert on_disk.read_text(encoding="utf-8") == "héllo\nwörld\n"
    info = on_disk.stat()
    assert info.st_uid == owner and stat.S_IMODE(info.st_mode) & 0o022 == 0
    if os.geteuid() == 0:
        assert owner != 0  # the desktop's own user, never root

    listed = await homes.ok("desktop_files_list", path="~/Downloads")
    (entry,) = [e for e in listed["entries"] if e["name"] == "report.txt"]
    assert (entry["type"], entry["size"]) == ("file", 14) and listed["truncated"] is False
    assert abs(entry["mtime"] - info.st_mtime) < 1
    whole = await homes.ok("desktop_file_read", path=str(on_disk))
    assert (whole["content"], whole["size"], whole["eof"]) == ("héllo\nwörld\n", 14, True)

    blob = bytes(range(256)) * 4
    await homes.ok(
        "desktop_file_write",
        path="bin/blob",
        encoding="base64",
        content=base64.b64encode(blob).decode(),
    )
    assert (home / "bin" / "blob").read_bytes() == blob
    part = await homes.ok(
        "desktop_file_read", path="bin/blob", offset=100, length=50, encoding="base64"
    )
    assert base64.b64decode(part["content_b64"]) == blob[100:150] and part["eof"] is False
    assert await homes.refused("desktop_file_read", path="bin/blob") == "action_failed"  # not UTF-8

    assert await homes.refused("desktop_file_delete", path="bin") == "action_failed"  # not empty
    assert (await homes.ok("desktop_file_delete", path="bin/blob"))["deleted"] is True
    assert not (home / "bin" / "blob").exists()
    await homes.ok("desktop_file_delete", path="bin")  # an empty folder
    assert not (home / "bin").exists()
    assert await homes.refused("desktop_file_read", path="bin/blob") == "not_found"


async def test_the_old_file_command_still_needs_the_opt_in(homes: Homes) -> None:
    assert await homes.refused("desktop_file", op="exists", path="x") == "forbidden"


async def test_the_audit_names_the_file_by_a_hash(homes: Homes) -> None:
    await homes.ok("desktop_file_write", path="Documents/secret-plan.txt", content="x")
    rows = await homes.stack.app.state.parts.store.list_audit(relay_id=homes.stack.relay_id)
    (row,) = [r for r in rows if r.op == "desktop.file_write"][-1:]
    digest = path_hash(homes.stack.seed.conversation_id, "Documents/secret-plan.txt")
    assert row.outcome == f"write:{digest}"
    assert "secret-plan" not in repr(row)


@pytest.mark.parametrize(
    "path",
    [
        "../escape.txt",
        "Downloads/../../escape.txt",
        "/etc/passwd",
        "/tmp/escape.txt",
        "~root/escape.txt",
    ],
)
async def test_paths_that_leave_the_home_are_refused(homes: Homes, path: str) -> None:
    home = homes.home(homes.main)
    before = _digest(Path("/etc/passwd"))
    assert await homes.refused("desktop_file_read", path=path) == OUTSIDE
    assert await homes.refused("desktop_file_write", path=path, content="owned") == OUTSIDE
    assert await homes.refused("desktop_file_delete", path=path) == OUTSIDE
    assert _digest(Path("/etc/passwd")) == before
    for where in (home.parent / "escape.txt", Path("/tmp/escape.txt"), home / "escape.txt"):
        assert not where.exists(), where


async def test_symbolic_links_are_never_followed(homes: Homes) -> None:
    home, other_home = homes.home(homes.main), homes.home(homes.other)
    assert home != other_home
    await homes.ok("desktop_file_write", homes.other, path="private.txt", content="other's")
    (home / "passwd").symlink_to("/etc/passwd")
    (home / "neighbour").symlink_to(other_home)
    before = _digest(Path("/etc/passwd")), _digest(other_home / "private.txt")
    try:
        assert await homes.refused("desktop_file_read", path="passwd") == OUTSIDE
        assert await homes.refused("desktop_file_write", path="passwd/x", content="x") == OUTSIDE
        assert await homes.refused("desktop_file_read", path="neighbour/private.txt") == OUTSIDE
        assert await homes.refused("desktop_files_list", path="neighbour") == OUTSIDE
        assert (
            await homes.refused("desktop_file_write", path="neighbour/new.txt", content="x")
            == OUTSIDE
        )
        assert await homes.refused("desktop_file_delete", path="neighbour/private.txt") == OUTSIDE
        # nor is a link replaced: it is refused as a name, whatever it points to
        assert await homes.refused("desktop_file_write", path="passwd", content="x") == OUTSIDE
        assert os.readlink(home / "passwd") == "/etc/passwd"
        # a delete removes the link, not its target
        await homes.ok("desktop_file_delete", path="neighbour")
        assert not (home / "neighbour").exists()
        assert (_digest(Path("/etc/passwd")), _digest(other_home / "private.txt")) == before
        assert not (other_home / "new.txt").exists()
        listed = await homes.ok("desktop_files_list", path="~")
        assert "neighbour" not in {e["name"] for e in listed["entries"]}
    finally:
        for name in ("passwd", "neighbour"):
            (home / name).unlink(missing_ok=True)


async def test_fifos_and_devices_are_refused(homes: Homes) -> None:
    home = homes.home(homes.main)
    os.mkfifo(home / "pipe")
    if os.geteuid() == 0:
        os.mknod(home / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    try:
        assert await homes.refused("desktop_file_read", path="pipe") == OUTSIDE  # never hangs
        assert await homes.refused("desktop_file_write", path="pipe", content="x") == OUTSIDE
        assert stat.S_ISFIFO(os.lstat(home / "pipe").st_mode)
        if os.geteuid() == 0:
            assert await homes.refused("desktop_file_read", path="null") == OUTSIDE
            assert await homes.refused("desktop_file_write", path="null", content="x") == OUTSIDE
        listed = await homes.ok("desktop_files_list", path=".")
        assert {e["name"]: e["type"] for e in listed["entries"]}["pipe"] == "other"
    finally:
        (home / "pipe").unlink(missing_ok=True)
        (home / "null").unlink(missing_ok=True)


async def test_a_file_larger_than_the_limit_is_refused(homes: Homes) -> None:
    home = homes.home(homes.main)
    text = "x" * 600_000  # over RELAYDESK_FILE_MAX_MB=0.5 (524,288 bytes)
    assert await homes.refused("desktop_file_write", path="big.txt", content=text) == (
        "file_too_large"
    )
    assert not (home / "big.txt").exists()
    assert not [p for p in home.iterdir() if p.name.startswith(".relaydesk-")]


@pytest.mark.parametrize(
    ("name", "args", "field"),
    [
        ("desktop_file_write", {"path": "a.txt"}, "content"),
        ("desktop_file_write", {"path": "a.txt", "content": "%%", "encoding": "base64"}, "content"),
        (
            "desktop_file_write",
            {"path": "a.txt", "content": "x", "encoding": "latin-1"},
            "encoding",
        ),
        ("desktop_file_read", {"path": "a.txt", "offset": -1}, "offset"),
        ("desktop_file_read", {"path": "a.txt", "length": 0}, "length"),
        ("desktop_file_read", {"path": ""}, "path"),
        ("desktop_file_read", {"path": "a\u0000b"}, "path"),
        ("desktop_file_read", {"path": "~"}, "path"),
        ("desktop_file_delete", {"path": "a.txt", "mode": 1}, "mode"),
        ("desktop_files_list", {"path": 7}, "path"),
    ],
)
async def test_bad_arguments_name_the_field(
    homes: Homes, name: str, args: dict[str, Any], field: str
) -> None:
    status, body = await homes.act(name, **args)
    assert (status, body["error"]["code"]) == (400, "invalid_args"), body
    assert (
        field in body["error"]["message"].split(":")[0]
        or body["error"].get("details", {}).get("field") == field
    ), body


async def test_a_read_member_lists_and_reads_but_never_writes(homes: Homes) -> None:
    home = homes.home(homes.main)
    await homes.ok("desktop_file_write", path="shared.txt", content="for everyone")
    status, listed = await homes.act("desktop_files_list", token=homes.reader, path="~")
    assert status == 200 and "shared.txt" in {e["name"] for e in listed["entries"]}
    status, read = await homes.act("desktop_file_read", token=homes.reader, path="shared.txt")
    assert status == 200 and read["content"] == "for everyone"
    attempts: tuple[tuple[str, dict[str, Any]], ...] = (
        ("desktop_file_write", {"path": "shared.txt", "content": "no"}),
        ("desktop_file_delete", {"path": "shared.txt"}),
    )
    for name, args in attempts:
        status, body = await homes.act(name, None, homes.reader, **args)
        assert (status, body["error"]["code"]) == (403, "forbidden"), body
    assert (home / "shared.txt").read_text(encoding="utf-8") == "for everyone"


async def test_a_read_member_never_reads_hidden_files(homes: Homes) -> None:
    await homes.ok("desktop_file_write", path=".secrets/token.txt", content="the key")
    status, listed = await homes.act("desktop_files_list", token=homes.reader, path="~")
    assert status == 200
    assert not [e["name"] for e in listed["entries"] if e["name"].startswith(".")], listed
    for path in (".secrets/token.txt", "~/.secrets/token.txt"):
        status, body = await homes.act("desktop_file_read", token=homes.reader, path=path)
        assert (status, body["error"]["code"]) == (403, "forbidden"), body
        assert body["error"]["field"] == "path" and "the key" not in str(body)
    status, body = await homes.act("desktop_files_list", token=homes.reader, path=".secrets")
    assert (status, body["error"]["code"]) == (403, "forbidden"), body
    # A writer (the owner of the desktop's work) still sees and reads them.
    status, listed = await homes.act("desktop_files_list", path="~")
    assert status == 200 and ".secrets" in {e["name"] for e in listed["entries"]}


async def test_a_persons_takeover_and_stop_refuse_an_agents_write(homes: Homes) -> None:
    home = homes.home(homes.main)
    stack = homes.stack
    await homes.ok("desktop_file_write", path="held.txt", content="before")
    await stack.action("desktop_take_control", person=True, slot="main")
    try:
        assert (
            await homes.refused("desktop_file_write", path="held.txt", content="during")
            == "takeover_active"
        )
        assert await homes.refused("desktop_file_delete", path="held.txt") == "takeover_active"
        # looking is not acting: a read still answers
        assert (await homes.ok("desktop_file_read", path="held.txt"))["content"] == "before"
    finally:
        await stack.action("desktop_hand_back", person=True, slot="main")
    assert (home / "held.txt").read_text(encoding="utf-8") == "before"
    await homes.ok("desktop_file_write", path="held.txt", content="after")
    await stack.action("agent_stop", person=True, slot="main")
    status, body = await homes.act("desktop_file_write", path="held.txt", content="stopped")
    assert (status, body["error"]["code"]) == (409, "stopped_by_user"), body
    assert (home / "held.txt").read_text(encoding="utf-8") == "after"


# -- the desktop's file worker ---------------------------------------------------------------

WORKER = "home-file-worker"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except FileNotFoundError:
        return False
    return state.rpartition(")")[2].split()[0] != "Z"


def _uid(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text(encoding="utf-8")
    (line,) = [entry for entry in status.splitlines() if entry.startswith("Uid:")]
    return int(line.split()[2])  # effective


def _cgroup(pid: int) -> str:
    return Path(f"/proc/{pid}/cgroup").read_text(encoding="utf-8")


async def test_one_worker_per_desktop_serves_its_ops_and_is_replaced_when_killed(
    homes: Homes,
) -> None:
    desktop = homes.other
    for _ in range(3):
        await homes.ok("desktop_files_list", desktop, path="~")
    await homes.ok("desktop_file_write", desktop, path="Downloads/worker.txt", content="one")
    (worker,) = homes.processes(desktop, WORKER)
    assert _alive(worker)
    # As the desktop's user, in the desktop's cgroup (where its X server is).
    assert _uid(worker) == homes.home(desktop).stat().st_uid
    (xvfb,) = homes.processes(desktop, "Xvfb")
    assert _cgroup(worker) == _cgroup(xvfb)
    # Another desktop has its own.
    await homes.ok("desktop_files_list", homes.main, path="~")
    (main,) = homes.processes(homes.main, WORKER)
    assert main != worker and _cgroup(main) != _cgroup(worker)

    os.kill(worker, 9)
    await wait_until(lambda: not _alive(worker), 10, "the worker to die")
    read = await homes.ok("desktop_file_read", desktop, path="Downloads/worker.txt")
    assert read["content"] == "one"
    (replaced,) = [pid for pid in homes.processes(desktop, WORKER) if _alive(pid)]
    assert replaced != worker and _cgroup(replaced) == _cgroup(xvfb)


async def test_the_worker_stops_with_its_desktop(homes: Homes) -> None:
    desktop = await homes.stack.start_desktop("worker")
    await homes.ok("desktop_files_list", desktop, path="~")
    (worker,) = homes.processes(desktop, WORKER)
    assert _alive(worker)
    await homes.stack.stop_desktop(desktop)
    await wait_until(lambda: not _alive(worker), 10, "the worker to stop")
    # A new desktop in the slot gets a worker of its own.
    again = await homes.stack.start_desktop("worker")
    listed = await homes.ok("desktop_files_list", again, path="~")
    assert listed["desktop_session_id"] == again.desktop_session_id
    assert [pid for pid in homes.processes(again, WORKER) if pid != worker]
    await homes.stack.stop_desktop(again)
