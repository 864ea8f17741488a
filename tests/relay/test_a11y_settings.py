"""The relay's accessibility settings and the flag Chromium-based apps get."""

from __future__ import annotations

import json

import pytest

from relay.a11y.settings import A11yConfigError, A11ySettings
from relay.desktops.launch import accessible_argv

pytestmark = pytest.mark.unit


def test_defaults_allow_physical_input_on_virtual_desktops_only():
    settings = A11ySettings.from_env({})
    assert settings.physical_allowed("virtual") and not settings.physical_allowed("local")
    assert settings.allow is None and settings.deny == ()
    assert settings.snapshot_ttl_s == 120 and settings.call_timeout_ms == 250


def test_lists_are_lower_case_and_reach_the_worker():
    settings = A11ySettings.from_env(
        {
            "RELAYDESK_A11Y_DENY_APPS": "KeePassXC, ,secrets",
            "RELAYDESK_A11Y_READ_ONLY_APPS": "Chromium",
            "RELAYDESK_A11Y_SNAPSHOT_TTL_S": "30",
        }
    )
    policy = json.loads(settings.worker_env()["RELAYDESK_A11Y_POLICY"])
    assert policy == {"deny": ["keepassxc", "secrets"], "read_only": ["chromium"], "allow": None}
    assert settings.worker_env()["RELAYDESK_A11Y_SNAPSHOT_TTL_S"] == "30"


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("RELAYDESK_A11Y_PHYSICAL", "maybe", "true or false"),
        ("RELAYDESK_A11Y_SNAPSHOT_TTL_S", "soon", "a number"),
        ("RELAYDESK_A11Y_SNAPSHOT_TTL_S", "0", "from 1"),
        ("RELAYDESK_A11Y_CALL_TIMEOUT_MS", "5000", "to 2000"),
    ],
)
def test_bad_values_name_the_variable(name, value, says):
    with pytest.raises(A11yConfigError) as caught:
        A11ySettings.from_env({name: value})
    assert name in str(caught.value) and says in str(caught.value)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["chromium", "https://x"], ["chromium", "--force-renderer-accessibility", "https://x"]),
        (["/usr/bin/google-chrome"], ["/usr/bin/google-chrome", "--force-renderer-accessibility"]),
        (
            ["chromium", "--force-renderer-accessibility"],
            ["chromium", "--force-renderer-accessibility"],
        ),
        (
            ["chromium", "--disable-renderer-accessibility"],
            ["chromium", "--disable-renderer-accessibility"],
        ),
        (["xterm"], ["xterm"]),
        ([], []),
    ],
)
def test_chromium_based_apps_get_the_renderer_flag_once(argv, expected):
    assert accessible_argv(argv) == expected
