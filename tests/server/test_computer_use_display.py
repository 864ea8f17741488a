"""The computer-use doors' display scaling: sizes under Anthropic's limits, and points that map
to the screen and back exactly at odd ratios."""

from __future__ import annotations

import pytest

from server.computer_use.display import (
    MAX_LONG_EDGE,
    MAX_PIXELS,
    Display,
    default_size,
    display_for,
    parse_size,
)
from wire.errors import InvalidArgs

pytestmark = pytest.mark.unit

ODD = [(1366, 768), (1920, 1200), (2560, 1440), (3840, 2160), (1024, 768), (800, 1280)]


@pytest.mark.parametrize("screen", ODD)
def test_the_default_display_is_the_largest_under_the_limits(screen):
    width, height = default_size(screen)
    assert width * height <= MAX_PIXELS and max(width, height) <= MAX_LONG_EDGE
    assert abs(width / height - screen[0] / screen[1]) < 0.005
    if screen[0] * screen[1] <= MAX_PIXELS and max(screen) <= MAX_LONG_EDGE:
        assert (width, height) == screen
    else:  # one pixel more on the long side would break a limit
        bigger = (width + 1) * (height + 1)
        assert bigger > MAX_PIXELS * 0.995 or max(width, height) + 1 > MAX_LONG_EDGE


@pytest.mark.parametrize("screen", ODD)
def test_every_display_point_maps_inside_its_span_and_back(screen):
    display = Display(screen, default_size(screen))
    for axis in (0, 1):
        shown, full = display.shown[axis], screen[axis]
        seen = set()
        for d in range(shown):
            point = (d, 0) if axis == 0 else (0, d)
            s = display.to_screen(*point)[axis]
            assert d * full / shown <= s < (d + 1) * full / shown
            assert display.to_display(*((s, 0) if axis == 0 else (0, s)))[axis] == d
            seen.add(s)
        assert len(seen) == shown and max(seen) <= full - 1


def test_an_unscaled_display_is_the_identity():
    display = Display((1366, 768), (1366, 768))
    assert display.to_screen(1365, 767) == (1365, 767)
    assert display.to_display(17, 3) == (17, 3)


@pytest.mark.parametrize(
    ("value", "field"),
    [("12x", "display"), ("8x8", "display"), ("1x99999999", "display"), ("axb", "display")],
)
def test_bad_display_sizes_name_the_field(value, field):
    with pytest.raises(InvalidArgs) as caught:
        parse_size(value)
    assert caught.value.details["field"] == field


def test_a_display_larger_than_the_screen_is_refused():
    with pytest.raises(InvalidArgs):
        display_for((1366, 768), (1920, 1080))
    assert display_for((1920, 1200), (1280, 600)).shown == (1280, 600)


def test_points_off_the_display_are_refused_naming_the_field():
    display = Display((1920, 1200), (1356, 847))
    with pytest.raises(InvalidArgs) as caught:
        display.on_display("coordinate", 1356, 0)
    assert caught.value.details["field"] == "coordinate"
