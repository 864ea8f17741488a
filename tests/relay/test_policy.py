"""The relay's denied apps (``relay/policy.py``): one setting, two names, read alike by every
agent tool's settings, and one way of naming an app."""

from __future__ import annotations

import json
import os

import pytest

from relay.a11y.apps import App, Policy
from relay.a11y.client import code_bundle
from relay.a11y.settings import A11ySettings
from relay.desktop_tools.service import DesktopTools
from relay.desktop_tools.settings import DesktopToolSettings
from relay.policy import DeniedApps, app_ids, command_of
from wire.ops import DENIED_APPS_CAPABILITY

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("env", "names"),
    [
        ({}, set()),
        ({"RELAYDESK_DENY_APPS": "KeePassXC, ,Thunderbird"}, {"keepassxc", "thunderbird"}),
        ({"RELAYDESK_A11Y_DENY_APPS": "KeePassXC"}, {"keepassxc"}),
        (
            {"RELAYDESK_DENY_APPS": "keepassxc", "RELAYDESK_A11Y_DENY_APPS": "secrets,KEEPASSXC"},
            {"keepassxc", "secrets"},
        ),
    ],
)
def test_either_name_of_the_setting_denies_and_every_tool_reads_the_same(env, names):
    assert DeniedApps.from_env(env).names == names
    assert DesktopToolSettings.from_env(env).denied.names == names
    worker = json.loads(A11ySettings.from_env(env).worker_env()["RELAYDESK_A11Y_POLICY"])
    assert set(worker["deny"]) == names
    assert bool(DeniedApps.from_env(env)) is bool(names)


def test_a_relay_that_denies_apps_says_so_in_its_hello():
    denied = DesktopToolSettings(denied=DeniedApps(frozenset({"keepassxc"})))
    assert DENIED_APPS_CAPABILITY in DesktopTools(denied).capabilities()
    assert DENIED_APPS_CAPABILITY not in DesktopTools(DesktopToolSettings()).capabilities()


def test_an_app_is_known_by_what_it_says_and_by_its_command():
    assert app_ids(("a11y_app.py", "A11y_app.py"), "python3") == {
        "a11y_app.py",
        "python3",
    }
    assert app_ids((None, " ", "XTerm"), None) == {"xterm"}
    assert command_of(os.getpid()) and command_of(None) is None and command_of(-1) is None
    denied = DeniedApps(frozenset({"xterm"}))
    assert denied.denies(app_ids(("secretterm", "XTerm"), None))
    assert not denied.denies(app_ids(("a11y_app.py",), "python3"))


def test_the_accessibility_worker_uses_the_same_definition():
    policy = Policy(deny=DeniedApps(frozenset({"a11y_app.py"})))
    form = App(":1.5", "a11y_app.py", None, "python3")
    assert policy.refusal(form, acting=False) is not None
    assert "RELAYDESK_DENY_APPS" in str(policy.refusal(form, acting=False))
    # the worker's code bundle carries the shared module, before the modules that import it
    names = [name for name, _source in json.loads(code_bundle())]
    assert names.index("relay.policy") < names.index("relay.a11y.apps")
