"""The client reads one name per setting; the former names still work, with a warning."""

from __future__ import annotations

import pytest

from relaydesk_client.settings import TOKEN_ENV, URL_ENV, env_setting

pytestmark = pytest.mark.unit


def test_the_names_are_the_ones_the_command_line_reads() -> None:
    assert (URL_ENV, TOKEN_ENV) == ("RELAYDESK_SERVER_URL", "RELAYDESK_API_TOKEN")


def test_a_former_name_is_read_with_a_warning_naming_the_new_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(URL_ENV, raising=False)
    monkeypatch.setenv("RELAYDESK_URL", "http://desk.example.org")
    with pytest.warns(FutureWarning, match="RELAYDESK_URL is deprecated.*RELAYDESK_SERVER_URL"):
        assert env_setting(URL_ENV) == "http://desk.example.org"


def test_the_current_name_wins_without_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV, "rdk_new")
    monkeypatch.setenv("RELAYDESK_TOKEN", "rdk_old")
    assert env_setting(TOKEN_ENV) == "rdk_new"  # warnings are errors in the tests
