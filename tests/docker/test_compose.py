"""The whole system from ``docker/compose.yaml``, brought up the way docs/docker.md says.

PostgreSQL and Redis are the stand-ins built from Debian's packages (``scripts/docker-build
postgres redis``), chosen with ``RELAYDESK_POSTGRES_IMAGE`` and ``RELAYDESK_REDIS_IMAGE``, as on a
machine that reaches no registry; the server and the relay are relaydesk's images. The project
has a name of its own, its settings file and the relay's token live in a temporary directory,
the server is published on a free loopback port only, and ``docker-compose down -v`` of that
project removes its containers, network and volumes whatever the outcome. The first-run set-up
is the documented one: ``up`` of the database, bus and server, the admin CLI through
``docker-compose exec``, the relay's token into its secret file, ``up`` of the relay.
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import secrets
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from tests.support.doc_blocks import code_blocks, section
from tests.support.docker import (
    BUILD_TIMEOUT_S,
    REPO_ROOT,
    DockerError,
    api_action,
    build_images,
    docker,
    require_docker,
    unique_name,
    wait_for,
)
from tests.support.processes import free_port, scaled

pytestmark = [pytest.mark.docker, pytest.mark.timeout(scaled(BUILD_TIMEOUT_S) + 600)]

COMPOSE_FILE = REPO_ROOT / "docker" / "compose.yaml"
IMAGES = ("server", "relay", "postgres", "redis")
POSTGRES_IMAGE = "relaydesk/postgres:dev"
REDIS_IMAGE = "relaydesk/redis:dev"
RELAY_NAME = "compose-relay"
# The relay's user in its image: its token file (a Compose secret, bind-mounted) must be
# readable by it.
RELAY_UID = 10001
GEOMETRY = (1280, 800)
# What docker/compose.yaml cannot do without (docs/docker.md, the variables' table).
REQUIRED = {
    "RELAYDESK_POSTGRES_PASSWORD": "x",
    "RELAYDESK_REDIS_PASSWORD": "redispassword0123",
    "RELAYDESK_CLUSTER_SECRET": "0123456789abcdef",
}


@dataclass
class Compose:
    """One Compose project of docker/compose.yaml, driven as ``rdc`` in docs/docker.md."""

    project: str
    workdir: Path
    port: int

    @property
    def env_file(self) -> Path:
        return self.workdir / "relaydesk.env"

    @property
    def token_file(self) -> Path:
        return self.workdir / "relay.token"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def run(self, *args: str, timeout: float = 180.0, check: bool = True) -> str:
        """``docker-compose -p PROJECT -f docker/compose.yaml --env-file FILE ARGS``."""
        argv = [
            "docker-compose",
            "--project-name",
            self.project,
            "--file",
            str(COMPOSE_FILE),
            "--env-file",
            str(self.env_file),
            *args,
        ]
        try:
            result = subprocess.run(
                argv,
                cwd=REPO_ROOT,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=scaled(timeout),
                check=False,
            )
        except FileNotFoundError as err:
            raise DockerError("docker-compose is not installed (scripts/install adds it)") from err
        if check and result.returncode != 0:
            raise DockerError(
                f"docker-compose {' '.join(args)} exited {result.returncode}:\n"
                f"{result.stderr.strip()}\n{result.stdout.strip()}"
            )
        return result.stdout

    def admin(self, *args: str) -> str:
        """``rdc exec -T server relaydesk admin ARGS`` (no TTY: a test has none)."""
        return self.run("exec", "-T", "server", "relaydesk", "admin", *args)

    def admin_json(self, *args: str) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(self.admin(*args, "--json"))
        return result

    def container(self, service: str) -> str:
        container_id = self.run("ps", "--quiet", service).strip()
        assert container_id, f"no {service} container in project {self.project}"
        return container_id

    def readyz(self) -> dict[str, Any] | None:
        status, body = _get(f"{self.url}/readyz")
        return body if status == 200 else None

    def logs(self) -> str:
        return self.run("logs", "--no-color", "--tail", "60", check=False, timeout=60)


@dataclass
class Setup:
    """What the documented first run made: an API token, the conversation, the relay."""

    api_token: str
    conversation_id: str

    def action(self, compose: Compose, name: str, **body: Any) -> tuple[int, Any]:
        payload = {"conversation_id": self.conversation_id, **body}
        return api_action(compose.url, self.api_token, name, payload)


def _get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status, json.loads(response.read())
    except (urllib.error.URLError, OSError, ValueError):
        return 0, None


def _write_settings(compose: Compose) -> None:
    """docs/docker.md's settings file, plus what a machine without a registry and a test's
    own port and token file need."""
    settings = {
        "RELAYDESK_POSTGRES_PASSWORD": secrets.token_hex(16),
        "RELAYDESK_REDIS_PASSWORD": secrets.token_hex(16),
        "RELAYDESK_CLUSTER_SECRET": secrets.token_hex(16),
        "RELAYDESK_PORT": str(compose.port),
        "RELAYDESK_PUBLIC_URL": compose.url,
        "RELAYDESK_POSTGRES_IMAGE": POSTGRES_IMAGE,
        "RELAYDESK_REDIS_IMAGE": REDIS_IMAGE,
        "RELAYDESK_RELAY_TOKEN_SECRET": str(compose.token_file),
    }
    compose.env_file.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
    compose.env_file.chmod(0o600)


def _store_relay_token(compose: Compose, token: str) -> None:
    """The token file as the docs make it: the relay's user's alone (chown needs root; as
    another user it is left readable by all, inside this test's private directory)."""
    compose.token_file.write_text(f"{token}\n")
    if os.geteuid() == 0:
        os.chown(compose.token_file, RELAY_UID, -1)
        compose.token_file.chmod(0o400)
    else:
        compose.token_file.chmod(0o444)


def _first_run(compose: Compose) -> Setup:
    """docs/docker.md, "First run", step by step."""
    compose.run("up", "--detach", "postgres", "redis", "server")
    wait_for(lambda: compose.readyz() is not None, 120, "the server's /readyz")
    compose.admin("create-user", "alice", "--admin")
    api_token = compose.admin_json("create-token", "alice")["token"]
    conversation = compose.admin_json("create-conversation", "Team", "--member", "alice:owner")
    relay = compose.admin_json("add-relay", RELAY_NAME, "--owner", "alice")
    _store_relay_token(compose, relay["token"])
    compose.admin("share-relay", RELAY_NAME, conversation["conversation_id"])
    compose.run("up", "--detach", "relay")
    return Setup(api_token, conversation["conversation_id"])


def _leftovers(project: str) -> list[str]:
    label = f"label=com.docker.compose.project={project}"
    containers = docker("ps", "--all", "--quiet", "--filter", label).split()
    volumes = docker("volume", "ls", "--quiet", "--filter", label).split()
    networks = docker("network", "ls", "--quiet", "--filter", label).split()
    return containers + volumes + networks


@pytest.fixture(scope="module")
def compose(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Compose]:
    require_docker()
    started = time.monotonic()
    build_images(*IMAGES)
    print(f"\nscripts/docker-build {' '.join(IMAGES)}: {time.monotonic() - started:.1f} s")
    workdir = tmp_path_factory.mktemp("compose")
    workdir.chmod(0o700)
    compose = Compose(unique_name("compose"), workdir, free_port())
    _write_settings(compose)
    try:
        yield compose
    finally:
        print(compose.logs())
        compose.run("down", "--volumes", "--remove-orphans", "--timeout", "30", timeout=300)
        left = _leftovers(compose.project)
        assert not left, f"docker-compose down -v left {left}"


@pytest.fixture(scope="module")
def setup(compose: Compose) -> Setup:
    began = time.monotonic()
    setup = _first_run(compose)
    print(f"\nfirst run (up, admin set-up, relay up): {time.monotonic() - began:.1f} s")
    return setup


def _config(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``docker-compose config`` of docker/compose.yaml with ``env`` and no settings file."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RELAYDESK_")}
    return subprocess.run(
        ["docker-compose", "--file", str(COMPOSE_FILE), "config"],
        cwd=REPO_ROOT,
        env={**clean, **env},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=scaled(60),
        check=False,
    )


def test_the_compose_file_is_accepted_with_the_official_images_by_default() -> None:
    result = _config(REQUIRED)
    assert result.returncode == 0, result.stderr
    for service in ("postgres", "redis", "server", "relay"):
        assert f"  {service}:" in result.stdout
    assert "image: postgres:15-bookworm" in result.stdout
    assert "image: redis:7-bookworm" in result.stdout
    # Redis asks for the password; the server's URL carries it; no command line shows it.
    assert "requirepass" in result.stdout and "REDISCLI_AUTH: redispassword0123" in result.stdout
    assert "redis://:redispassword0123@redis:6379/0" in result.stdout
    assert "requirepass redispassword0123" not in result.stdout
    assert f"file: {COMPOSE_FILE.parent / 'relay.token'}" in result.stdout


def test_one_tag_names_both_relaydesk_images() -> None:
    """``RELAYDESK_TAG`` is the tag ``scripts/docker-build`` gives the images: Compose runs the
    server and the relay of that build, and the relay with a browser is its ``-browser``."""
    tagged = _config(REQUIRED | {"RELAYDESK_TAG": "1.4.2"})
    assert tagged.returncode == 0, tagged.stderr
    assert "image: relaydesk/server:1.4.2" in tagged.stdout
    assert "image: relaydesk/relay:1.4.2\n" in tagged.stdout
    browser = _config(REQUIRED | {"RELAYDESK_TAG": "1.4.2", "RELAYDESK_RELAY_VARIANT": "-browser"})
    assert "image: relaydesk/relay:1.4.2-browser" in browser.stdout
    plain = _config(REQUIRED)
    assert "image: relaydesk/server:dev" in plain.stdout
    assert "image: relaydesk/relay:dev\n" in plain.stdout


def _first_run_block() -> list[str]:
    block = section("docker.md", "Compose: the whole system").split("```sh\n", 1)[1]
    return block.split("```", 1)[0].splitlines()


def test_the_documented_first_run_needs_no_sudo_and_names_its_project() -> None:
    """As root (README) nothing needs sudo; ``rdc`` carries a project name of its own, so two
    installations on one Docker daemon never share containers or volumes."""
    for block in code_blocks("docker.md"):
        assert not re.search(r"\bsudo\b", block.text), block.where
    alias = next(line for line in _first_run_block() if line.startswith("alias rdc="))
    assert re.search(r" (-p|--project-name) [a-z0-9][a-z0-9_-]*", alias), alias


def test_the_relays_secret_file_exists_before_compose_first_loads_the_project(
    tmp_path: Path,
) -> None:
    """Compose warns about a missing secret file on every command that loads the project: the
    first run creates it before its first ``rdc``, and then the warning never shows."""
    lines = _first_run_block()
    creates = next(i for i, line in enumerate(lines) if re.match(r"touch .*relay\.token", line))
    first_rdc = next(i for i, line in enumerate(lines) if line.startswith("rdc "))
    assert creates < first_rdc, lines
    env = tmp_path / "relaydesk.env"
    env.write_text("".join(f"{k}={v}\n" for k, v in REQUIRED.items()))
    token = tmp_path / "relay.token"
    env.write_text(env.read_text() + f"RELAYDESK_RELAY_TOKEN_SECRET={token}\n")
    argv = ["docker-compose", "-p", unique_name("secret"), "-f", str(COMPOSE_FILE)]
    argv += ["--env-file", str(env), "ps"]
    clean = {k: v for k, v in os.environ.items() if not k.startswith("RELAYDESK_")}

    def ps() -> str:
        done = subprocess.run(
            argv, env=clean, capture_output=True, text=True, timeout=scaled(60), check=False
        )
        assert done.returncode == 0, done.stderr
        return done.stderr

    assert "undefined secret file" in ps()  # what the docs explain
    token.touch()
    assert "undefined secret file" not in ps()


@pytest.mark.parametrize("missing", sorted(REQUIRED))
def test_a_missing_required_setting_is_named(missing: str) -> None:
    result = _config({k: v for k, v in REQUIRED.items() if k != missing})
    assert result.returncode != 0
    assert f"set {missing}" in result.stderr, result.stderr


def _relay_connected(compose: Compose) -> bool:
    body = compose.readyz()
    return body is not None and int(body["relays_connected"]) == 1


def test_the_documented_first_run_connects_the_relay(compose: Compose, setup: Setup) -> None:
    wait_for(lambda: _relay_connected(compose), 60, "the relay to connect")
    body = compose.readyz()
    assert body is not None and body["database"] is True and body["redis"] is True, body
    server: dict[str, Any] = json.loads(docker("inspect", compose.container("server")))[0]
    assert not server["Config"]["User"].startswith("0"), server["Config"]["User"]
    ports = server["HostConfig"]["PortBindings"]
    assert ports == {"8400/tcp": [{"HostIp": "127.0.0.1", "HostPort": str(compose.port)}]}
    relay: dict[str, Any] = json.loads(docker("inspect", compose.container("relay")))[0]
    assert relay["State"]["Running"] is True and not relay["HostConfig"]["PortBindings"]


def test_the_stand_in_database_and_bus_serve_as_non_root_users(
    compose: Compose, setup: Setup
) -> None:
    for service, image in (("postgres", POSTGRES_IMAGE), ("redis", REDIS_IMAGE)):
        info: dict[str, Any] = json.loads(docker("inspect", compose.container(service)))[0]
        assert info["Config"]["Image"] == image
        assert info["State"]["Health"]["Status"] == "healthy", info["State"]["Health"]
        assert docker("exec", info["Id"], "id", "-u") == "999"
        assert not info["HostConfig"]["PortBindings"], f"{service} publishes a port"
    # The database the server migrated, under the user and name the compose file gives.
    tables = docker(
        "exec",
        compose.container("postgres"),
        "psql",
        "--username=relaydesk",
        "--dbname=relaydesk",
        "--tuples-only",
        "--command=SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'",
    )
    assert int(tables) > 0


def test_a_desktop_starts_gives_a_screenshot_and_stops(compose: Compose, setup: Setup) -> None:
    wait_for(lambda: _relay_connected(compose), 60, "the relay to connect")
    geometry = f"{GEOMETRY[0]}x{GEOMETRY[1]}"
    status, started = setup.action(compose, "desktop_start", relay=RELAY_NAME, geometry=geometry)
    assert status == 200, started
    desktop = started["desktop"]
    assert desktop["state"] == "running"
    session_id = desktop["desktop_session_id"]

    status, shot = setup.action(compose, "screen", relay=RELAY_NAME, action="screenshot")
    assert status == 200, shot
    assert shot["desktop_session_id"] == session_id
    image = Image.open(io.BytesIO(base64.b64decode(shot["image"])))
    assert (image.format, image.size) == ("PNG", GEOMETRY)

    status, stopped = setup.action(
        compose, "desktop_stop_confirm", relay=RELAY_NAME, desktop_session_id=session_id
    )
    assert status == 200, stopped
    status, listed = setup.action(compose, "desktop_list_active", probe=True)
    assert status == 200, listed
    assert session_id not in [row["desktop_session_id"] for row in listed["desktops"]]
