"""Container desktop pieces that need no Docker daemon: settings, the container's
configuration, records, host display numbers, the shared authority file, availability."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from relay.desktops.config import DesktopSettings
from relay.desktops.credentials import DesktopCredentials, RelayAuthority
from relay.desktops.docker.config import (
    NETWORK_ENV,
    DockerDesktopSettings,
    parse_memory,
    relay_key,
)
from relay.desktops.docker.container import (
    ContainerDesktop,
    ContainerSpec,
    StartingContainer,
    check_socket_paths,
)
from relay.desktops.docker.display import FIRST_DISPLAY, HostDisplay, link_sound, unlink_sound
from relay.desktops.docker.launcher import NO_DAEMON, ContainerLauncher
from relay.desktops.state import StateFile
from wire.errors import ErrorCode, InvalidArgs, OpError
from wire.ids import DesktopSessionId

pytestmark = pytest.mark.unit

SESSION = DesktopSessionId("ab" * 16)


def _desktop(run_dir: Path, display: int = 123) -> ContainerDesktop:
    return ContainerDesktop(
        desktop_session_id=SESSION,
        slot="main",
        geometry="1280x800",
        depth=24,
        display=display,
        started_at="2026-01-01T00:00:00.000Z",
        started_by="alice",
        run_dir=run_dir,
        container_id="c" * 64,
        init_pid=4242,
        init_started=1.5,
        credentials=DesktopCredentials.new(),
        audio=True,
    )


def test_settings_default_to_no_network_and_limits() -> None:
    settings = DockerDesktopSettings.from_env({})
    assert settings.enabled and settings.network == "none"
    assert (settings.cpus, settings.memory_bytes) == (1.0, 1024**3)
    assert settings.image == "relaydesk/desktop:dev"
    custom = DockerDesktopSettings.from_env(
        {
            "RELAYDESK_DOCKER_DESKTOPS": "off",
            "RELAYDESK_DOCKER_DESKTOP_CPUS": "0.5",
            "RELAYDESK_DOCKER_DESKTOP_MEMORY": "512m",
            NETWORK_ENV: "bridge",
            "DOCKER_HOST": "unix:///run/user/1000/docker.sock",
        }
    )
    assert not custom.enabled and custom.cpus == 0.5 and custom.network == "bridge"
    assert custom.memory_bytes == 512 * 1024**2
    assert custom.socket == Path("/run/user/1000/docker.sock")
    assert DockerDesktopSettings.from_env({"DOCKER_HOST": "tcp://h:2376"}).socket is None


@pytest.mark.parametrize(
    ("name", "value"),
    [
        (NETWORK_ENV, "host"),
        (NETWORK_ENV, "container:abc"),
        ("RELAYDESK_DOCKER_DESKTOP_MEMORY", "12x"),
        ("RELAYDESK_DOCKER_DESKTOP_MEMORY", "1m"),
        ("RELAYDESK_DOCKER_DESKTOP_CPUS", "0"),
        ("RELAYDESK_DOCKER_DESKTOPS", "maybe"),
    ],
)
def test_settings_refuse_what_would_weaken_isolation_or_cannot_be_read(
    name: str, value: str
) -> None:
    with pytest.raises(InvalidArgs) as err:
        DockerDesktopSettings.from_env({name: value})
    assert err.value.details == {"field": name}


def test_memory_sizes() -> None:
    assert parse_memory("2g") == 2 * 1024**3
    assert parse_memory("1073741824") == 1024**3
    assert parse_memory("768MB") == 768 * 1024**2


def test_the_container_is_unprivileged_offline_limited_and_sees_only_its_directory(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "d"
    spec = ContainerSpec(
        session_id=SESSION,
        slot="main",
        relay_key="k" * 12,
        run_dir=run_dir,
        display=101,
        geometry="1280x800",
        depth=24,
        audio=False,
        programs=(("openbox", "--sm-disable"), ("xterm",)),
        x11vnc_flags=("-wait", "2"),
        orphan_timeout_s=600,
        user=None,
    )
    config = spec.config(DockerDesktopSettings(cpus=1.5, memory_bytes=256 * 1024**2))
    host = config["HostConfig"]
    assert config["User"] == f"{os.getuid()}:{os.getgid()}"
    assert host["NetworkMode"] == "none"
    assert (host["NanoCpus"], host["Memory"], host["MemorySwap"]) == (
        1_500_000_000,
        256 * 1024**2,
        256 * 1024**2,
    )
    assert host["CapDrop"] == ["ALL"] and host["ReadonlyRootfs"] is True
    assert "no-new-privileges" in host["SecurityOpt"]
    assert {m["Source"] for m in host["Mounts"]} == {str(run_dir), str(run_dir / "x11")}
    assert "PortBindings" not in host and "Binds" not in host
    assert config["Cmd"] == ["openbox", "--sm-disable", ";", "xterm", ";"]
    assert config["Labels"]["relaydesk.session"] == SESSION
    assert f"RELAYDESK_RUN={run_dir}" in config["Env"]


def test_records_round_trip_and_rows_carry_no_host_details(tmp_path: Path) -> None:
    desktop = _desktop(tmp_path / "d")
    row = desktop.to_row()
    assert row["kind"] == "docker" and row["display"] == ":123"
    assert not {"container_id", "run_dir", "init_pid", "x_cookie", "vnc_secret"} & set(row)
    state = StateFile(tmp_path / "state" / "docker-desktops.json")
    state.save([desktop], [StartingContainer(SESSION, "other", tmp_path / "s")])
    records, starting = state.load_all()
    again = ContainerDesktop.from_record(records[0])
    assert again.credentials == desktop.credentials and again.adopted
    assert again.to_record() == desktop.to_record()
    assert StartingContainer.from_record(starting[0]).slot == "other"
    assert (state.path.stat().st_mode & 0o777) == 0o600


def test_a_directory_too_deep_for_unix_sockets_is_refused(tmp_path: Path) -> None:
    check_socket_paths(Path("/var/lib/relaydesk/docker/0123456789ab/0123456789abcdef"))
    with pytest.raises(OSError, match="too long"):
        check_socket_paths(tmp_path / ("x" * 80))


def test_a_host_display_is_claimed_handed_to_the_container_and_released(tmp_path: Path) -> None:
    (tmp_path / ".X11-unix").mkdir()
    x11 = tmp_path / "run" / "x11"
    first = HostDisplay.claim(x11, tmp_path)
    second = HostDisplay.claim(x11, tmp_path)
    assert (first.number, second.number) == (FIRST_DISPLAY, FIRST_DISPLAY + 1)
    assert first.holder() == os.getpid() and first.links_to(x11)
    assert os.readlink(first.link) == str(x11 / f"X{FIRST_DISPLAY}")
    first.hand_to(4242)
    assert first.holder() == 4242
    assert first.lock.read_text() == f"{4242:10d}\n"  # the X servers' own format
    first.release(x11, (os.getpid(),))  # the lock names the container now: kept
    assert first.lock.exists() and not os.path.lexists(first.link)
    first.release(x11, (4242,))
    assert not first.lock.exists()
    second.release(x11, (os.getpid(),))
    assert not list(tmp_path.glob(".X*-lock"))


def test_a_number_a_live_x_server_holds_is_skipped(tmp_path: Path) -> None:
    (tmp_path / ".X11-unix").mkdir()
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(tmp_path / ".X11-unix" / f"X{FIRST_DISPLAY}"))
        server.listen()
        assert HostDisplay.claim(tmp_path / "x11", tmp_path).number == FIRST_DISPLAY + 1


def test_the_sound_link_names_the_containers_directory(tmp_path: Path) -> None:
    pulse = tmp_path / "run" / "pulse"
    link = link_sound(tmp_path / "sound", 105, pulse, shared=False)
    assert link.name == "display-105" and os.readlink(link) == str(pulse)
    unlink_sound(tmp_path / "sound", 105, tmp_path / "elsewhere")
    assert os.path.lexists(link)
    unlink_sound(tmp_path / "sound", 105, pulse)
    assert not os.path.lexists(link)


def test_the_authority_file_keeps_every_kinds_displays(tmp_path: Path) -> None:
    authority = RelayAuthority(tmp_path / "Xauthority")
    authority.write([(1, b"a" * 16)])
    authority.write([(101, b"b" * 16)], "docker")
    data = authority.path.read_bytes()
    assert b"a" * 16 in data and b"b" * 16 in data
    authority.write([])
    data = authority.path.read_bytes()
    assert b"a" * 16 not in data and b"b" * 16 in data


def test_relay_keys_differ_by_state_directory(tmp_path: Path) -> None:
    assert relay_key(tmp_path / "a") != relay_key(tmp_path / "b")
    assert len(relay_key(tmp_path)) == 12


async def test_without_a_daemon_a_start_is_unavailable_and_says_why(tmp_path: Path) -> None:
    config = DesktopSettings(state_dir=tmp_path / "state")
    settings = DockerDesktopSettings(socket=tmp_path / "no-docker.sock")
    launcher = ContainerLauncher(config, settings, authority=RelayAuthority(tmp_path / "xa"))
    desktops = launcher.lifecycle()
    assert await launcher.probe() == NO_DAEMON
    assert await desktops.adopt() == []
    with pytest.raises(OpError) as err:
        await desktops.start()
    assert err.value.code is ErrorCode.UNAVAILABLE and err.value.message == NO_DAEMON
    with pytest.raises(OpError) as refused:
        await desktops.start(profile="standard")
    assert refused.value.details == {"field": "profile"}
    assert await desktops.stop(slot="main", desktop_session_id=SESSION) == {
        "stopped": False,
        "was_running": False,
    }
    await desktops.close(stop_desktops=True)
    assert not (tmp_path / "state" / "docker-desktops.json").exists()
    off = ContainerLauncher(
        config, DockerDesktopSettings(enabled=False), authority=RelayAuthority(tmp_path / "xa")
    )
    assert "turned off" in (await off.probe() or "")
