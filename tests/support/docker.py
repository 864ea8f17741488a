"""relaydesk's images as containers for tests and benchmarks: build, run, seed, probe, remove.

Every container runs with host networking and binds loopback only, so test traffic never
leaves this machine. Containers and volumes are named ``relaydesk-test-…``, labelled, and
removed by the id this module started; nothing else is touched. Docker is required: a missing
or silent daemon fails the tests (``scripts/install`` installs and starts it), it is never
skipped.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import secrets
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from tests.support.processes import free_port, scaled

REPO_ROOT = Path(__file__).resolve().parents[2]
TAG = "dev"
SERVER_IMAGE = f"relaydesk/server:{TAG}"
RELAY_IMAGE = f"relaydesk/relay:{TAG}"
# The relay with Firefox ESR (``scripts/docker-build relay-browser``).
RELAY_BROWSER_IMAGE = f"relaydesk/relay:{TAG}-browser"
LABEL = "relaydesk.test=1"
# Targets of the images and of a relay container's first desktop (docs/docker.md).
# 350: PyAV and its FFmpeg libraries (about 100 MB installed) join recordings' segments and
# decode the pictures of trajectory exports (docs/recording.md).
SERVER_IMAGE_TARGET_MB = 350
RELAY_IMAGE_TARGET_MB = 900
FIRST_DESKTOP_TARGET_S = 3.0
BUILD_TIMEOUT_S = 1800.0
# Short liveness figures so a restarted server is noticed and redialled at once.
FAST_ENV = {
    "RELAYDESK_HEARTBEAT_S": "1",
    "RELAYDESK_LIVENESS_TIMEOUT_S": "5",
    "RELAYDESK_RELAY_BACKOFF_MAX_S": "1",
    "RELAYDESK_PRESENCE_INTERVAL_S": "0.5",
}


# Run inside a container (images have Python, not always procps): its processes from /proc,
# without the Python that lists them.
_LIST_PROCESSES = """
import json, os
rows = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    if int(pid) == os.getpid():
        continue
    try:
        fields = dict(
            line.split(":", 1) for line in open(f"/proc/{pid}/status").read().splitlines()
        )
    except OSError:
        continue
    rows.append({"pid": pid, "comm": fields["Name"].strip(),
                 "uid": fields["Uid"].split()[0], "stat": fields["State"].split()[0],
                 "ppid": fields["PPid"].strip(),
                 "pgid": open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[2]})
print(json.dumps(rows))
"""


class DockerError(RuntimeError):
    """A docker command failed; the message carries its output."""


def docker(*args: str, timeout: float = 60.0, check: bool = True) -> str:
    """Run ``docker ARGS`` and return its standard output (stripped)."""
    try:
        result = subprocess.run(
            ["docker", *args],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=scaled(timeout),
            check=False,
        )
    except FileNotFoundError as err:
        raise DockerError("docker is not installed (scripts/install adds it)") from err
    if check and result.returncode != 0:
        raise DockerError(
            f"docker {' '.join(args)} exited {result.returncode}: "
            f"{result.stderr.strip() or result.stdout.strip()}"
        )
    return result.stdout.strip()


def require_docker() -> None:
    """Fail (never skip) when the daemon does not answer, naming the fix."""
    try:
        docker("info", "--format", "{{.ServerVersion}}", timeout=20)
    except DockerError as err:
        raise DockerError(
            f"{err}\nthe docker tier needs a running Docker daemon this user may use: run "
            "`sudo scripts/install` (it starts dockerd), or deselect the tier with "
            '`scripts/test -m "not docker"`'
        ) from err


# What ``build_images`` built in this test process: each image once per run (the docker tier's
# modules and the bench_docker_desktops quick run share a worker, one group: tests/support/
# scheduling.py), whichever of them comes first.
_BUILT: set[str] = set()
DEFAULT_TARGETS = ("server", "relay", "desktop")


def build_images(*targets: str) -> float:
    """Build ``targets`` (default: the script's own, server, relay and desktop) with
    ``scripts/docker-build`` unless this run built them already; return the seconds it took
    (0 when every one was built before in this run)."""
    missing = [target for target in targets or DEFAULT_TARGETS if target not in _BUILT]
    if not missing:
        return 0.0
    started = time.monotonic()
    result = subprocess.run(
        ["bash", str(REPO_ROOT / "scripts" / "docker-build"), *missing],
        cwd=REPO_ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=scaled(BUILD_TIMEOUT_S),
        check=False,
    )
    if result.returncode != 0:
        tail = result.stderr[-6000:]
        command = " ".join(("scripts/docker-build", *missing))
        raise DockerError(f"{command} exited {result.returncode}:\n{tail}")
    _BUILT.update(missing)
    return time.monotonic() - started


def image_size_mb(image: str) -> float:
    """Uncompressed size of ``image`` in MB (10^6 bytes), as `docker images` shows it."""
    return int(docker("image", "inspect", "--format", "{{.Size}}", image)) / 1e6


def unique_name(kind: str) -> str:
    return f"relaydesk-test-{kind}-{secrets.token_hex(4)}"


@dataclass
class Container:
    """One container this process started (by its id)."""

    id: str
    name: str

    def exec(self, *argv: str, timeout: float = 60.0, stdin: str | None = None) -> str:
        if stdin is None:
            return docker("exec", self.id, *argv, timeout=timeout)
        result = subprocess.run(
            ["docker", "exec", "-i", self.id, *argv],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=scaled(timeout),
            check=False,
        )
        if result.returncode != 0:
            raise DockerError(f"docker exec {' '.join(argv)}: {result.stderr.strip()}")
        return result.stdout.strip()

    def inspect(self) -> dict[str, Any]:
        data: list[dict[str, Any]] = json.loads(docker("inspect", self.id))
        return data[0]

    def running(self) -> bool:
        return bool(self.inspect()["State"]["Running"])

    def processes(self) -> list[dict[str, str]]:
        """Every other process in the container: pid, real user id, state letter, name, parent."""
        out = self.exec("python3", "-c", _LIST_PROCESSES)
        rows: list[dict[str, str]] = json.loads(out)
        return rows

    def stop(self, timeout_s: int = 20) -> float:
        """``docker stop`` (SIGTERM, SIGKILL after ``timeout_s``); return the seconds it took."""
        started = time.monotonic()
        docker("stop", "--time", str(timeout_s), self.id, timeout=timeout_s + 30)
        return time.monotonic() - started

    def exit_code(self) -> int:
        return int(self.inspect()["State"]["ExitCode"])

    def logs(self) -> str:
        result = subprocess.run(
            ["docker", "logs", "--tail", "200", self.id],
            capture_output=True,
            text=True,
            timeout=scaled(30),
            check=False,
        )
        return result.stdout + result.stderr

    def remove(self) -> None:
        docker("rm", "--force", "--volumes", self.id, check=False)


def run_container(
    image: str,
    kind: str,
    env: dict[str, str],
    *,
    volumes: dict[str, str] | None = None,
    run_args: tuple[str, ...] = (),
    args: tuple[str, ...] = (),
) -> Container:
    """``docker run -d`` with host networking; ``volumes`` maps volume name → mount point,
    ``run_args`` go to ``docker run``, ``args`` to the image's entrypoint."""
    name = unique_name(kind)
    argv = ["run", "--detach", "--network", "host", "--name", name, "--label", LABEL, *run_args]
    for key, value in env.items():
        argv += ["--env", f"{key}={value}"]
    for volume, mount in (volumes or {}).items():
        argv += ["--volume", f"{volume}:{mount}"]
    container_id = docker(*argv, image, *args)
    return Container(container_id, name)


@dataclass
class Seed:
    """What the admin CLI created in a fresh server: user, API token, conversation, relay."""

    api_token: str
    conversation_id: str
    relay_name: str
    relay_token: str


@dataclass
class ServerContainer:
    """The server image on a loopback port, its data in a named volume."""

    volume: str
    port: int = field(default_factory=free_port)
    container: Container | None = None
    # Every container ``start`` ran (a restart runs a new one), removed with the volume.
    started: list[Container] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    # Docker's health probe every second instead of the image's 10 s, so tests see it soon.
    run_args: tuple[str, ...] = ("--health-interval", "1s")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Container:
        env = {"RELAYDESK_HOST": "127.0.0.1", "RELAYDESK_PORT": str(self.port), **FAST_ENV}
        self.container = run_container(
            SERVER_IMAGE,
            "server",
            {**env, **self.env},
            volumes={self.volume: "/var/lib/relaydesk"},
            run_args=self.run_args,
        )
        self.started.append(self.container)
        return self.container

    def readyz(self) -> dict[str, Any] | None:
        try:
            with urllib.request.urlopen(f"{self.url}/readyz", timeout=2) as response:
                body: dict[str, Any] = json.loads(response.read())
                return body if response.status == 200 else None
        except (urllib.error.URLError, OSError, ValueError):
            return None

    def wait_ready(self, timeout: float = 60.0) -> float:
        """Poll ``/readyz`` until it answers 200; return the seconds waited."""
        return wait_for(lambda: self.readyz() is not None, timeout, "the server's /readyz", self)

    def wait_relays(self, count: int, timeout: float = 30.0) -> float:
        def connected() -> bool:
            body = self.readyz()
            return body is not None and int(body["relays_connected"]) >= count

        return wait_for(connected, timeout, f"{count} relay(s) connected", self)

    def admin(self, *args: str, stdin: str | None = None) -> dict[str, Any]:
        """``relaydesk admin ARGS --json`` inside the server container."""
        assert self.container is not None
        out = self.container.exec("relaydesk", "admin", *args, "--json", stdin=stdin)
        result: dict[str, Any] = json.loads(out)
        return result

    def seed(self, relay_name: str = "docker-relay") -> Seed:
        """The usual principals, made with the CLI the way an operator would."""
        self.admin("create-user", "alice", "--admin")
        token = self.admin("create-token", "alice")
        conversation = self.admin("create-conversation", "Team", "--member", "alice:owner")
        relay = self.admin("add-relay", relay_name, "--owner", "alice")
        self.admin("share-relay", relay_name, conversation["conversation_id"])
        return Seed(token["token"], conversation["conversation_id"], relay_name, relay["token"])


def relay_env(server: ServerContainer, token: str) -> dict[str, str]:
    return {"RELAYDESK_SERVER_URL": server.url, "RELAYDESK_RELAY_TOKEN": token, **FAST_ENV}


def wait_for(predicate: Any, timeout: float, what: str, server: Any = None) -> float:
    """Poll ``predicate`` until true; return the seconds it took, or fail naming ``what``."""
    started = time.monotonic()
    deadline = started + scaled(timeout)
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {scaled(timeout):.0f}s waiting for {what}")
        time.sleep(0.05)
    return time.monotonic() - started


def api_action(server_url: str, token: str, name: str, body: dict[str, Any]) -> tuple[int, Any]:
    """``POST /api/v1/actions/{name}`` with a bearer token; returns (status, JSON body)."""
    request = urllib.request.Request(
        f"{server_url}/api/v1/actions/{name}",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=scaled(60)) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"null")


def remove_volume(name: str) -> None:
    docker("volume", "rm", "--force", name, check=False)


def create_volume() -> str:
    name = unique_name("data")
    docker("volume", "create", "--label", LABEL, name)
    return name


@contextlib.contextmanager
def server_on_new_volume() -> Iterator[ServerContainer]:
    """A server (not started yet) with its data in a new volume; on exit every container it
    started and the volume are removed."""
    volume = create_volume()
    server = ServerContainer(volume)
    try:
        yield server
    finally:
        for container in server.started:
            container.remove()
        remove_volume(volume)


# The geometry of the desktops a ``RelayStack`` starts.
DESKTOP_GEOMETRY = (1280, 800)
# What may run in an idle relay container: tini (PID 1) and the relay.
IDLE_RELAY_COMMANDS = frozenset({"tini", "relaydesk"})


@dataclass
class RelayStack:
    """A server container with the usual principals and one relay container dialling it."""

    server: ServerContainer
    relay: Container
    seed: Seed

    def action(self, name: str, **body: Any) -> tuple[int, Any]:
        payload = {"conversation_id": self.seed.conversation_id, **body}
        return api_action(self.server.url, self.seed.api_token, name, payload)

    def start_desktop(self) -> dict[str, Any]:
        width, height = DESKTOP_GEOMETRY
        status, body = self.action(
            "desktop_start", relay=self.seed.relay_name, geometry=f"{width}x{height}"
        )
        assert status == 200, body
        return dict(body)

    def stop_desktop(self, desktop_session_id: str) -> None:
        status, body = self.action(
            "desktop_stop_confirm",
            relay=self.seed.relay_name,
            desktop_session_id=desktop_session_id,
        )
        assert status == 200, body

    def live_rows(self) -> list[dict[str, Any]]:
        status, body = self.action("desktop_list_active", probe=True)
        assert status == 200, body
        return list(body["desktops"])

    def wait_relay_idle(self, timeout: float = 15.0) -> float:
        """Wait until only tini and the relay run in the relay container; no zombie is left."""

        left: list[dict[str, str]] = []

        def idle() -> bool:
            left[:] = [p for p in self.relay.processes() if p["comm"] not in IDLE_RELAY_COMMANDS]
            return not left

        try:
            waited = wait_for(idle, timeout, "the relay container to hold only tini and the relay")
        except AssertionError as err:
            raise AssertionError(f"{err}; still there: {left}") from None
        zombies = [p for p in self.relay.processes() if p["stat"].startswith("Z")]
        assert not zombies, zombies
        return waited

    def screenshot(self) -> dict[str, Any]:
        """The ``screen`` tool's screenshot of the relay's desktop (a PNG in ``image``)."""
        status, shot = self.action("screen", relay=self.seed.relay_name, action="screenshot")
        assert status == 200, shot
        return dict(shot)


@contextlib.contextmanager
def relay_stack(
    relay_image: str, env: dict[str, str] | None = None, run_args: tuple[str, ...] = ()
) -> Iterator[RelayStack]:
    """A seeded server on a new volume and a relay container of ``relay_image`` (``env`` and
    ``run_args`` added to its ``docker run``), connected; both removed on exit."""
    with server_on_new_volume() as server:
        server.start()
        server.wait_ready()
        seed = server.seed()
        relay_vars = relay_env(server, seed.relay_token) | (env or {})
        relay = run_container(relay_image, "relay", relay_vars, run_args=run_args)
        try:
            server.wait_relays(1)
            yield RelayStack(server, relay, seed)
        finally:
            relay.remove()


def png_pixels(shot: dict[str, Any]) -> np.ndarray:
    """RGB pixels of a screenshot's PNG (``image``, base64)."""
    image = Image.open(io.BytesIO(base64.b64decode(shot["image"]))).convert("RGB")
    return np.asarray(image)
