"""Where a relay finds its token: flag, variable, or a file named by a variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from relay.config import (
    DEFAULT_BITRATE,
    RelayConfigError,
    RelaySettings,
    parse_bitrate,
    read_token,
)

pytestmark = pytest.mark.unit


def _file(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_token_file_flag_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RELAYDESK_RELAY_TOKEN", "rdr_from_variable")
    monkeypatch.setenv("RELAYDESK_RELAY_TOKEN_FILE", _file(tmp_path, "env", "rdr_env_file"))
    assert read_token(_file(tmp_path, "flag", "rdr_from_flag\n")) == "rdr_from_flag"


def test_variable_before_token_file_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RELAYDESK_RELAY_TOKEN", " rdr_from_variable ")
    monkeypatch.setenv("RELAYDESK_RELAY_TOKEN_FILE", _file(tmp_path, "env", "rdr_env_file"))
    assert read_token(None) == "rdr_from_variable"


def test_token_file_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RELAYDESK_RELAY_TOKEN", raising=False)
    monkeypatch.setenv("RELAYDESK_RELAY_TOKEN_FILE", _file(tmp_path, "env", "rdr_secret\n"))
    assert read_token(None) == "rdr_secret"


def test_no_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RELAYDESK_RELAY_TOKEN", raising=False)
    monkeypatch.delenv("RELAYDESK_RELAY_TOKEN_FILE", raising=False)
    assert read_token(None) == ""


def test_settings_are_read_once_from_one_environment(tmp_path: Path) -> None:
    environ = {
        "RELAYDESK_SERVER_URL": "http://127.0.0.1:8400",
        "RELAYDESK_RELAY_TOKEN": "rdr_x",
        "RELAYDESK_DATA_DIR": str(tmp_path),
        "RELAYDESK_HOST_HELPER": "http://127.0.0.1:8500",
        "RELAYDESK_HOST_HELPER_TOKEN": " helper-secret ",
        "RELAYDESK_DIRECT_VNC_HOST": "127.0.0.1",
        "RELAYDESK_AUDIO_BITRATE": "64000",
        "RELAYDESK_LIVENESS_TIMEOUT_S": "12.5",
    }
    settings = RelaySettings.from_env(None, None, stop_desktops_on_exit=True, environ=environ)
    assert (settings.server_url, settings.token) == ("http://127.0.0.1:8400", "rdr_x")
    assert settings.state_dir == settings.desktops.state_dir == tmp_path / "relay"
    assert settings.host_helper_url == "http://127.0.0.1:8500"
    assert settings.host_helper_token == "helper-secret"
    assert "helper-secret" not in repr(settings)
    assert settings.direct_vnc_host == "127.0.0.1"
    assert (settings.audio_bitrate, settings.liveness_timeout_s) == (64000, 12.5)
    assert settings.stop_desktops_on_exit is True
    assert settings.connect_url == "ws://127.0.0.1:8400/relay/v1/connect"


def test_desktops_keep_their_state_where_the_settings_say(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RELAYDESK_DATA_DIR", str(tmp_path / "process"))
    environ = {
        "RELAYDESK_SERVER_URL": "http://127.0.0.1:8400",
        "RELAYDESK_RELAY_TOKEN": "rdr_x",
        "RELAYDESK_DATA_DIR": str(tmp_path / "given"),
    }
    settings = RelaySettings.from_env(None, None, environ=environ)
    assert settings.desktops.state_dir == tmp_path / "given" / "relay"


def test_flags_win_and_defaults_fill_the_rest() -> None:
    environ = {"RELAYDESK_SERVER_URL": "http://ignored:1", "RELAYDESK_RELAY_TOKEN": "rdr_x"}
    settings = RelaySettings.from_env("https://desk.example.org", None, environ=environ)
    assert settings.server_url == "https://desk.example.org"
    assert settings.direct_vnc_host is None
    assert settings.audio_bitrate == DEFAULT_BITRATE


@pytest.mark.parametrize(
    ("environ", "problem"),
    [
        ({"RELAYDESK_RELAY_TOKEN": "rdr_x"}, "--server"),
        ({"RELAYDESK_SERVER_URL": "http://h:1"}, "no relay token"),
        (
            {
                "RELAYDESK_SERVER_URL": "http://h:1",
                "RELAYDESK_RELAY_TOKEN": "rdr_x",
                "RELAYDESK_RELAY_BACKOFF_MAX_S": "soon",
            },
            "RELAYDESK_RELAY_BACKOFF_MAX_S",
        ),
    ],
)
def test_a_configuration_that_cannot_work_says_why(environ: dict[str, str], problem: str) -> None:
    with pytest.raises(RelayConfigError, match=problem):
        RelaySettings.from_env(None, None, environ=environ)


@pytest.mark.parametrize(
    ("raw", "bitrate"), [("", 96_000), ("x", 96_000), ("1", 6_000), ("64000", 64_000)]
)
def test_audio_bitrate_is_clamped(raw: str, bitrate: int) -> None:
    assert parse_bitrate(raw) == bitrate
