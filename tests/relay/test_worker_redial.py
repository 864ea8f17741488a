"""How soon a relay dials again (``relay.worker.redial_delay``): at once after a restart of the
server, less often the longer the server stays away, never in step with other relays."""

from __future__ import annotations

import pytest

from relay.config import RelaySettings
from relay.worker import REDIAL_SHARE, redial_delay

pytestmark = pytest.mark.unit

INITIAL, MAXIMUM = RelaySettings.backoff_initial_s, RelaySettings.backoff_max_s  # defaults


def test_the_first_redial_after_a_lost_connection_comes_within_half_a_second() -> None:
    for jitter in (0.0, 0.5, 1.0):
        assert redial_delay(0.0, INITIAL, MAXIMUM, jitter) <= 0.5
    # a server restart takes seconds: the relay still redials several times a second
    assert redial_delay(3.0, INITIAL, MAXIMUM, 0.0) <= 0.5


def test_the_wait_grows_with_the_outage_up_to_the_maximum() -> None:
    waits = [redial_delay(outage, INITIAL, MAXIMUM, 0.0) for outage in (0, 10, 30, 60, 600)]
    assert waits == sorted(waits)
    assert waits[2] == pytest.approx(30 * REDIAL_SHARE)
    assert waits[-1] == MAXIMUM


def test_jitter_takes_up_to_half_off() -> None:
    full = redial_delay(40.0, INITIAL, MAXIMUM, 0.0)
    assert redial_delay(40.0, INITIAL, MAXIMUM, 1.0) == pytest.approx(full / 2)
    drawn = {redial_delay(40.0, INITIAL, MAXIMUM) for _ in range(50)}
    assert len(drawn) > 1
    assert all(2.5 <= wait <= 5.0 for wait in drawn)
