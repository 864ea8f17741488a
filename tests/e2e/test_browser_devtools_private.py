"""The desktop's browser has a DevTools channel only the relay holds: Chromium started by the
relay runs with ``--remote-debugging-pipe`` and no debugging port, even when its command asks
for one; its holder's socket is in a directory only the relay's user enters; no socket of
them, and no DevTools endpoint anywhere on the host, answers the desktop's own user, another
desktop's user or ``nobody``; the relay still reaches it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import pwd
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio

from tests.support.a11y_stack import A11yStack
from tests.support.browser_stack import BROWSER_PROFILE, browser_stack, page_server
from tests.support.processes import scaled

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio(loop_scope="module")]

# Run as each user: every listening TCP port of the host and every socket path given is tried
# as a DevTools endpoint (an HTTP /json/version, which any DevTools server answers).
PROBE = r"""
import json, socket, sys
paths = json.loads(sys.argv[1])
answered, tried = [], 0
def ask(family, address):
    global tried
    tried += 1
    data = b""
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.settimeout(5.0)
            s.connect(address)
            s.sendall(b"GET /json/version HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
            data = b""
            while len(data) < 65536:
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
    except OSError:
        if not data:
            return
    if b"webSocketDebuggerUrl" in data or b"Browser" in data:
        answered.append(str(address))
for table, family, host in (("/proc/net/tcp", socket.AF_INET, "127.0.0.1"),
                            ("/proc/net/tcp6", socket.AF_INET6, "::1")):
    for line in open(table).read().splitlines()[1:]:
        fields = line.split()
        if fields[3] == "0A":
            ask(family, (host, int(fields[1].rsplit(":", 1)[1], 16)))
for path in paths:
    ask(socket.AF_UNIX, path)
print(json.dumps({"answered": answered, "tried": tried}))
"""


@pytest.fixture(scope="module")
def base_url() -> Iterator[str]:
    with page_server() as url:
        yield url


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(
    tmp_path_factory: pytest.TempPathFactory, base_url: str
) -> AsyncIterator[A11yStack]:
    # A command asking for a debugging port: the relay drops the flag.
    async with browser_stack(
        tmp_path_factory.mktemp("devtools"), base_url, "--remote-debugging-port=0"
    ) as stack:
        yield stack


def _browser_pids(profile: Path) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            line = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            continue
        # Chromium rewrites its command line as one string (its process title).
        if f"--user-data-dir={profile} ".encode() in line + b" ":
            pids.append(int(entry.name))
    return pids


def _socket_inodes(pids: list[int]) -> set[str]:
    inodes = set()
    for pid in pids:
        with_fds = Path(f"/proc/{pid}/fd")
        try:
            for fd in with_fds.iterdir():
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    return inodes


def _listening_tcp(inodes: set[str]) -> list[str]:
    listening = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:
                listening.append(fields[1])
    return listening


def _unix_paths(inodes: set[str]) -> list[str]:
    paths = []
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 8 and fields[6] in inodes and fields[7].startswith("/"):
            paths.append(fields[7])
    return paths


def _holder_sockets() -> list[str]:
    """The listening sockets of the browsers' DevTools holders."""
    return sorted(
        {
            fields[7]
            for line in Path("/proc/net/unix").read_text().splitlines()[1:]
            if len(fields := line.split()) >= 8 and "/devtools/" in fields[7]
        }
    )


async def _running_browser(stack: A11yStack) -> list[int]:
    profile = stack.shared / BROWSER_PROFILE
    deadline = time.monotonic() + scaled(60)
    while True:
        status, body = await stack.act("browser_tabs")
        pids = _browser_pids(profile)
        if status == 200 and pids and body["tabs"]:
            return pids
        assert time.monotonic() < deadline, body
        await asyncio.sleep(0.5)


def _probe_as(user: str, paths: list[str]) -> dict[str, object]:
    done = subprocess.run(
        [
            "setpriv",
            f"--reuid={user}",
            f"--regid={pwd.getpwnam(user).pw_gid}",
            "--clear-groups",
            "/usr/bin/python3",
            "-I",
            "-c",
            PROBE,
            json.dumps(paths),
        ],
        capture_output=True,
        text=True,
        timeout=scaled(120),
        check=True,
    )
    result: dict[str, object] = json.loads(done.stdout)
    return result


@contextlib.contextmanager
def _browser_with_a_port(profile: Path) -> Iterator[int]:
    profile.mkdir(mode=0o777)
    os.chmod(profile, 0o777)  # noqa: S103 - nobody's profile for this check, removed after
    child = subprocess.Popen(
        [
            "setpriv",
            "--reuid=nobody",
            f"--regid={pwd.getpwnam('nobody').pw_gid}",
            "--clear-groups",
            "chromium",
            "--headless=new",
            f"--user-data-dir={profile}",
            "--remote-debugging-port=0",
            "about:blank",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={"PATH": os.environ["PATH"], "HOME": str(profile)},
        start_new_session=True,
    )
    try:
        active = profile / "DevToolsActivePort"
        deadline = time.monotonic() + scaled(30)
        while not active.exists() or not active.read_text().strip():
            assert time.monotonic() < deadline, "the control browser did not listen"
            time.sleep(0.1)
        yield int(active.read_text().split()[0])
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait(10)


async def test_the_browser_runs_on_a_pipe_without_a_port(stack):
    pids = await _running_browser(stack)
    main = [p for p in pids if b"--type=" not in Path(f"/proc/{p}/cmdline").read_bytes()]
    assert main, pids
    words = Path(f"/proc/{main[0]}/cmdline").read_bytes().replace(b"\0", b" ").split()
    assert b"--remote-debugging-pipe" in words
    assert not [w for w in words if w.startswith(b"--remote-debugging-port")], words
    # Chromium writes this file only when it listens on a port.
    assert not (stack.shared / BROWSER_PROFILE / "DevToolsActivePort").exists()
    assert _listening_tcp(_socket_inodes(pids)) == []


async def test_no_devtools_endpoint_answers_other_users(stack):
    pids = await _running_browser(stack)
    desktop_uid = os.stat(f"/proc/{pids[0]}").st_uid
    desktop_user = pwd.getpwuid(desktop_uid).pw_name
    others = [
        p.pw_name
        for p in pwd.getpwall()
        if p.pw_name.startswith("relaydesk-desktop") and p.pw_uid != desktop_uid
    ]
    assert others, "no other desktop account on this host"
    holders = _holder_sockets()
    assert holders, "no DevTools holder socket"
    for holder in holders:  # in a directory only the relay's user may enter
        parent = Path(holder).parent.stat()
        assert (parent.st_uid, parent.st_mode & 0o777) == (os.getuid(), 0o700), holder
    paths = _unix_paths(_socket_inodes(pids)) + holders
    for user in ("nobody", others[0], desktop_user):
        probed = await asyncio.to_thread(_probe_as, user, paths)
        assert probed["answered"] == [], (user, probed)
        assert isinstance(probed["tried"], int) and probed["tried"] > 0
    # The probe does find a DevTools port where one listens: a browser of the test's own.
    with _browser_with_a_port(stack.shared / "control") as port:
        probed = await asyncio.to_thread(_probe_as, "nobody", [])
    answered = probed["answered"]
    assert isinstance(answered, list) and any(str(port) in a for a in answered), probed
    # The relay reaches the same browser over its pipe.
    tabs = await stack.ok("browser_tabs")
    assert tabs["backend"] == "cdp"
    assert [t["title"] for t in tabs["tabs"]] == ["Order form"], tabs


async def test_the_browser_and_its_channel_outlive_a_relay_restart(stack):
    # Last: the relay is killed (nothing of it can close the pipe) and started again.
    pids = await _running_browser(stack)
    before = (await stack.ok("browser_tabs"))["tabs"]
    relay = stack.relay_log
    relay.kill()
    relay._popen = None  # the same command again: the restarted relay adopts the desktop
    relay.start()
    deadline = time.monotonic() + scaled(60)
    while True:
        status, body = await stack.act("browser_tabs")
        if status == 200:
            break
        assert time.monotonic() < deadline, body
        await asyncio.sleep(0.5)
    assert [t["id"] for t in body["tabs"]] == [t["id"] for t in before]
    assert all(Path(f"/proc/{pid}").exists() for pid in pids)  # the same browser, still running
    snapshot = await stack.ok("browser_snapshot")
    assert 'push_button "Place order"' in snapshot["text"]
