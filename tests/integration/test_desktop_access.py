"""Who can reach a desktop: only relaydesk (its cookie and secret), never another local user.

A real desktop started by the relay's own code, then probed as ``nobody``: the X display, the
RFB server directly and through websockify, the relay's state, logs and private files, and the
server's database. Each probe must fail for ``nobody`` and succeed for the relay (the cookie,
the secret), so the test cannot pass by probing something that is simply down.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from relay.desktops import DesktopSettings, ProcessDesktops, process_desktops
from relay.vnc_target import VncTarget
from relay.wsframes import HEADROOM
from server.db.engine import create_engine
from tests.support.processes import free_port, scaled
from tests.support.xvfb import private_xvfb
from wire.errors import RfbHandshakeError
from wire.ops import RelayRow
from wire.rfb import RFB_3_8, VncClientHandshake, rfbauth_file_bytes

pytestmark = pytest.mark.integration

INTRUDER = Path(__file__).resolve().parent.parent / "support" / "intruder.py"
AS_NOBODY = ("setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups")
SYSTEM_PYTHON = shutil.which("python3", path="/usr/bin:/bin") or sys.executable
needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="probing as another local user (nobody) needs root"
)


def run(argv: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {"PATH": "/usr/bin:/bin:/usr/sbin:/sbin", "LANG": "C.UTF-8"}
    return subprocess.run(
        argv,
        env=base | (env or {}),
        capture_output=True,
        text=True,
        timeout=scaled(30),
        check=False,
        cwd="/",
    )


def as_nobody(*argv: str) -> subprocess.CompletedProcess[str]:
    return run([*AS_NOBODY, *argv])


def intrude(*args: str) -> dict[str, Any]:
    """Run a probe of tests/support/intruder.py as nobody."""
    readable = Path(tempfile.gettempdir()) / f"relaydesk-intruder-{os.getpid()}.py"
    shutil.copyfile(INTRUDER, readable)  # the checkout may be out of nobody's reach
    readable.chmod(0o644)
    result = as_nobody(SYSTEM_PYTHON, str(readable), *args)
    assert result.returncode == 0, result.stderr
    return dict(json.loads(result.stdout))


@pytest.fixture
def open_base() -> Iterator[Path]:
    """A world-traversable base directory, like a home directory or /var/lib (0755)."""
    base = Path(tempfile.mkdtemp(prefix="relaydesk-access-", dir="/tmp"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
async def desktop(open_base: Path) -> AsyncIterator[tuple[ProcessDesktops, RelayRow]]:
    """A desktop of the relay's own code, in a state dir an earlier run left too open."""
    state = open_base / "relay"
    (state / "desktop-logs").mkdir(parents=True, mode=0o755)
    state.chmod(0o755)
    (state / "desktop-logs" / "old.log").write_text("earlier run\n")
    (state / "desktop-logs" / "old.log").chmod(0o644)
    config = DesktopSettings(
        state_dir=state,
        apps=(),
        window_manager=(),
        default_profile="minimal",
        start_timeout_s=scaled(15),
        probe_timeout_s=scaled(3),
    )
    manager = process_desktops(config)
    row = await manager.start(kind="virtual", slot="access")
    try:
        yield manager, row
    finally:
        await manager.close(stop_desktops=True)


async def server_init_with(port: int, secret: bytes) -> bytes:
    """Authenticate to x11vnc with ``secret`` and return the ServerInit header."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        machine = VncClientHandshake(secret)
        async with asyncio.timeout(scaled(10)):
            while not machine.done:
                data = await reader.read(4096)
                if not data:
                    raise RfbHandshakeError("x11vnc hung up")
                machine.receive_data(data)
                writer.write(machine.data_to_send())
            writer.write(b"\x01")  # ClientInit
            return await reader.readexactly(24)
    finally:
        writer.close()


@needs_root
async def test_another_local_user_reaches_nothing_of_a_desktop(
    desktop: tuple[ProcessDesktops, RelayRow],
) -> None:
    manager, row = desktop
    config, display = manager.config, row["display"] or ""

    denied = as_nobody("xdpyinfo", "-display", display)
    assert denied.returncode != 0 and "unable to open display" in denied.stderr
    mine = run(["xdpyinfo", "-display", display], {"XAUTHORITY": str(config.authority_file)})
    assert mine.returncode == 0, mine.stderr

    for probe, port in (("rfb-tcp", row["vnc_port"]), ("rfb-ws", row["websockify_port"])):
        seen = intrude(probe, str(port))
        assert seen["banner"].startswith("RFB 003."), seen  # reached, and refused:
        assert 1 not in seen["types"], seen
        assert seen["security_result"] != 0 and "server_init" not in seen, seen
    secret = manager.launcher.vnc_secret(row["desktop_session_id"])
    assert secret is not None
    assert len(await server_init_with(row["vnc_port"], secret)) == 24

    private = config.run_dir / row["desktop_session_id"]
    paths = [
        config.state_dir,
        config.state_file,
        config.log_dir / "virtual-access.log",
        config.log_dir / "old.log",
        private / "Xauthority",
        private / "vncpasswd",
        config.authority_file,
    ]
    assert all(path.exists() for path in paths)
    assert intrude("read", *map(str, paths)) == dict.fromkeys(map(str, paths), "denied")


@needs_root
async def test_another_local_user_cannot_read_the_database(open_base: Path) -> None:
    data = open_base / "data"
    data.mkdir(mode=0o755)
    database = data / "relaydesk.db"
    database.write_bytes(b"")
    database.chmod(0o644)  # as an earlier version left it
    engine = create_engine(f"sqlite+aiosqlite:///{database}")
    async with engine.begin() as conn:
        await conn.execute(text("CREATE TABLE t (secret TEXT)"))
    await engine.dispose()
    assert (data.stat().st_mode & 0o777, database.stat().st_mode & 0o777) == (0o700, 0o600)
    assert intrude("read", str(data), str(database)) == {
        str(data): "denied",
        str(database): "denied",
    }


async def test_vnc_auth_response_against_real_x11vnc(tmp_path: Path) -> None:
    """x11vnc with an -rfbauth file accepts wire.rfb's answer, and refuses a wrong secret."""
    secret = b"k3y\xff\x01Zq!"
    passwd = tmp_path / "vncpasswd"
    passwd.write_bytes(rfbauth_file_bytes(secret))
    with private_xvfb(320, 200) as xvfb:
        port = free_port()
        x11vnc = subprocess.Popen(
            [
                "x11vnc",
                "-display",
                xvfb.display,
                "-rfbauth",
                str(passwd),
                "-localhost",
                "-forever",
                "-shared",
                "-quiet",
                "-rfbport",
                str(port),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            await _until_listening(port)
            header = await server_init_with(port, secret)
            assert header[:4] == struct.pack(">HH", 320, 200)
            with pytest.raises(RfbHandshakeError, match="authentication failed"):
                await server_init_with(port, b"wrong!!!")
            assert len(await _viewer_through_relay_target(port, secret)) == 24
        finally:
            x11vnc.kill()
            x11vnc.wait(timeout=scaled(5))


async def _viewer_through_relay_target(port: int, secret: bytes) -> bytes:
    """A viewer's bytes through the relay's channel target: None security, then ServerInit."""
    target = await VncTarget.open("127.0.0.1", port, secret)
    try:
        got = b""
        async with asyncio.timeout(scaled(10)):
            while len(got) < 12:
                got += bytes((await target.read())[HEADROOM:])
            assert got == RFB_3_8
            await target.write(b"RFB 003.008\n")
            got = bytes((await target.read())[HEADROOM:])
            assert got[:2] == b"\x01\x01"  # one type: None
            await target.write(b"\x01")
            got = got[2:] or bytes((await target.read())[HEADROOM:])
            assert got == b"\0\0\0\0"
            await target.write(b"\x01")
            init = b""
            while len(init) < 24:
                init += bytes((await target.read())[HEADROOM:])
            return init[:24]
    finally:
        await target.aclose()


async def _until_listening(port: int) -> None:
    async with asyncio.timeout(scaled(15)):
        while True:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                await asyncio.sleep(0.02)
                continue
            writer.close()
            return
