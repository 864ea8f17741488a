"""One slot rule: the relay's start/stop checks, the server's action schemas and the agent
doors' paths all use the pattern written in ``wire.desktop_rows``."""

from __future__ import annotations

import re

import pytest

from relay.desktops import validation
from server.actions import desktop as desktop_actions
from server.doors import admission as door_admission
from wire import desktop_rows
from wire.errors import InvalidArgs

pytestmark = pytest.mark.unit

NAMES = ["main", "a", "agent-1", "x_y", "0" * 32, "0" * 33, "Main", "-a", "_a", "", "a.b", "é"]


def test_the_relay_and_the_server_use_the_wire_slot_pattern() -> None:
    assert validation.SLOT_RE is desktop_rows.SLOT_RE
    assert door_admission.SLOT_RE is desktop_rows.SLOT_RE  # type: ignore[attr-defined]
    assert desktop_actions.SLOT["pattern"] == f"^{desktop_rows.SLOT_RE.pattern}$"
    assert not hasattr(door_admission, "_SLOT"), "the agent doors keep a pattern of their own"


@pytest.mark.parametrize("name", NAMES)
def test_every_door_accepts_the_same_slot_names(name: str) -> None:
    wire_ok = desktop_rows.SLOT_RE.fullmatch(name) is not None
    schema_ok = re.search(desktop_actions.SLOT["pattern"], name) is not None
    assert wire_ok == schema_ok
    if wire_ok:
        assert validation.check_slot(name) == name
    else:
        with pytest.raises(InvalidArgs, match=r"^slot: must match"):
            validation.check_slot(name)
