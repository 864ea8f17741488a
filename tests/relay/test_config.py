"""Where a relay finds its token: flag, variable, or a file named by a variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from relay.config import read_token

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
