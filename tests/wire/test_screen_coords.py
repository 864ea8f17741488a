"""Coordinate frames: normalized and zoom coordinates to screen pixels, zoom sizes, grid lines."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from wire.errors import InvalidArgs
from wire.guard import CropRect
from wire.screen_coords import (
    MAX_ZOOM_PIXELS,
    MAX_ZOOM_SIDE,
    MIN_GRID_SPACING,
    Frame,
    grid_for,
    image_position,
    zoom_size,
)

pytestmark = pytest.mark.unit

SCREEN = CropRect(0, 0, 1280, 800)
WHOLE = Frame.normalized(SCREEN)


def _field(error: pytest.ExceptionInfo[InvalidArgs]) -> str:
    return str(error.value.details["field"])


# -- normalized --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "pixel"),
    [(0, 0), (500, 640), (999, 1278), (1000, 1279), (0.5, 0), (0.79, 1), (250.4, 320)],
)
def test_normalized_is_the_pixel_that_holds_the_position(value: float, pixel: int) -> None:
    # floor(v * 1280 / 1000); the far edge (1000) is the last pixel
    assert WHOLE.point((value, 0), ("x", "y"))[0] == pixel


def test_normalized_is_relative_to_a_region_when_given() -> None:
    window = Frame.normalized(CropRect(100, 50, 400, 300))
    assert window.point((0, 0), ("x", "y")) == (100, 50)
    assert window.point((500, 500), ("x", "y")) == (300, 200)
    assert window.point((1000, 1000), ("x", "y")) == (499, 349)


@pytest.mark.parametrize(
    ("value", "problem"),
    [(1000.01, "outside 0..1000"), (-1, "outside 0..1000"), (math.inf, "number"), ("5", "number")],
)
def test_normalized_out_of_range_names_the_field(value: object, problem: str) -> None:
    with pytest.raises(InvalidArgs) as error:
        WHOLE.point((10, value), ("from.x", "from.y"))
    assert _field(error) == "from.y" and problem in error.value.message


@given(st.integers(1, 5000), st.integers(0, 4999), st.fractions(0, 1000))
def test_normalized_always_lands_inside_its_area(length: int, origin: int, value: object) -> None:
    frame = Frame.normalized(CropRect(origin, 0, length, 1))
    pixel = frame.point((float(value), 0), ("x", "y"))[0]  # type: ignore[arg-type]
    assert origin <= pixel < origin + length


@given(st.integers(1, 4000))
def test_the_centre_of_every_pixel_in_normalized_units_lands_on_that_pixel(length: int) -> None:
    frame = Frame.normalized(CropRect(0, 0, length, 1))
    for pixel in {0, length // 3, length // 2, length - 1}:
        centre = (pixel + 0.5) * 1000 / length
        assert frame.point((centre, 0), ("x", "y"))[0] == pixel


def test_pixels_are_screen_pixels_and_must_be_integers() -> None:
    assert Frame.pixels().point((17, 23), ("x", "y")) == (17, 23)
    with pytest.raises(InvalidArgs) as error:
        Frame.pixels().point((17.5, 23), ("x", "y"))
    assert _field(error) == "x"


# -- boxes -------------------------------------------------------------------------------------


def test_a_normalized_box_covers_every_pixel_it_touches() -> None:
    assert WHOLE.box((0, 0, 500, 500), "region") == CropRect(0, 0, 640, 400)
    # 100.1 → 128.128 px, width 0.1 → 0.128 px: one pixel
    assert WHOLE.box((100.1, 0, 0.1, 1000), "region") == CropRect(128, 0, 1, 800)


@pytest.mark.parametrize(
    ("box", "field"),
    [
        ((0, 0, 0, 10), "region.width"),
        ((900, 0, 200, 10), "region.width"),
        ((0, 0, 10, -1), "region.height"),
        ((1001, 0, 1, 1), "region.x"),
    ],
)
def test_bad_normalized_boxes_name_the_field(box: tuple[int, ...], field: str) -> None:
    with pytest.raises(InvalidArgs) as error:
        WHOLE.box(box, "region")  # type: ignore[arg-type]
    assert _field(error) == field


# -- zoom --------------------------------------------------------------------------------------


def test_zoom_pixels_map_to_the_screen_pixel_under_their_centre() -> None:
    frame = Frame.zoom(CropRect(100, 200, 320, 200), (640, 400))  # scale 2
    assert frame.point((0, 0), ("x", "y")) == (100, 200)
    assert frame.point((1, 1), ("x", "y")) == (100, 200)
    assert frame.point((2, 3), ("x", "y")) == (101, 201)
    assert frame.point((639, 399), ("x", "y")) == (419, 399)
    with pytest.raises(InvalidArgs) as error:
        frame.point((640, 0), ("x", "y"))
    assert _field(error) == "x" and "outside the zoom image" in error.value.message


@given(st.integers(1, 600), st.integers(0, 2000), st.sampled_from([1, 1.5, 2, 2.5, 3, 3.7, 4]))
def test_the_image_pixel_showing_a_screen_pixel_maps_back_to_it(
    length: int, origin: int, scale: float
) -> None:
    out = zoom_size(length, 1, scale)[0]
    frame = Frame.zoom(CropRect(origin, 0, length, 1), (out, 1))
    for pixel in {origin, origin + length // 2, origin + length - 1}:
        shown = image_position(pixel, origin, length, out)
        assert frame.point((shown, 0), ("x", "y"))[0] == pixel


@pytest.mark.parametrize(
    ("size", "scale", "out"),
    [
        ((320, 200), 1, (320, 200)),
        ((320, 200), 2, (640, 400)),
        ((333, 201), 2.5, (833, 503)),
        ((1, 1), 4, (4, 4)),
    ],
)
def test_zoom_sizes_round_half_up(
    size: tuple[int, int], scale: float, out: tuple[int, int]
) -> None:
    assert zoom_size(*size, scale) == out


@pytest.mark.parametrize("scale", [0.5, 4.01, 0, -2, True, "2", math.nan])
def test_a_scale_out_of_range_names_scale(scale: object) -> None:
    with pytest.raises(InvalidArgs) as error:
        zoom_size(100, 100, scale)  # type: ignore[arg-type]
    assert _field(error) == "scale"


def test_a_zoom_over_the_size_cap_says_what_fits() -> None:
    with pytest.raises(InvalidArgs) as error:
        zoom_size(1280, 800, 4)
    assert _field(error) == "scale"
    assert "5120x3200" in error.value.message and "at most 2.02 fits" in error.value.message
    width, height = zoom_size(1280, 800, 2.02)
    assert max(width, height) <= MAX_ZOOM_SIDE and width * height <= MAX_ZOOM_PIXELS


# -- grid --------------------------------------------------------------------------------------


def test_a_screenshot_grid_in_pixels_labels_every_100_pixels() -> None:
    grid = grid_for(Frame.pixels(), SCREEN, (1280, 800))
    assert grid.step == 100 and grid.coordinates == "pixels"
    assert [(line.position, line.label) for line in grid.columns[:3]] == [
        (0, 0),
        (100, 100),
        (200, 200),
    ]
    assert len(grid.columns) == 13 and len(grid.rows) == 8


def test_a_normalized_line_is_drawn_where_a_click_at_its_label_lands() -> None:
    grid = grid_for(WHOLE, SCREEN, (1280, 800))
    assert grid.step == 100
    for line in grid.columns:
        assert WHOLE.point((line.label, 0), ("x", "y"))[0] == line.position
    assert grid.columns[-1].label == 1000 and grid.columns[-1].position == 1279


@given(
    st.integers(0, 1000),
    st.integers(0, 600),
    st.integers(8, 700),
    st.integers(8, 500),
    st.sampled_from([1, 2, 3, 4]),
    st.booleans(),
)
def test_zoom_grid_lines_are_spaced_and_labels_map_back_to_their_pixel(
    x: int, y: int, width: int, height: int, scale: int, normalized: bool
) -> None:
    # A region the zoom refuses at this scale (over its pixel limit) has no grid to check.
    assume(width * scale * height * scale <= MAX_ZOOM_PIXELS)
    screen = CropRect(0, 0, 1700, 1100)
    region = CropRect(x, y, width, height)
    image = zoom_size(width, height, scale)
    frame = Frame.normalized(screen) if normalized else Frame.pixels()
    grid = grid_for(frame, region, image)
    for lines, index in ((grid.columns, 0), (grid.rows, 1)):
        positions = [line.position for line in lines]
        assert positions == sorted(positions)
        assert all(0 <= p < image[index] for p in positions)
        assert all(b - a >= MIN_GRID_SPACING - scale for a, b in itertools.pairwise(positions))
        zoom = Frame.zoom(region, image)
        for line in lines:
            at = [0, 0]
            at[index] = line.position
            shown = zoom.point((at[0], at[1]), ("x", "y"))[index]
            labelled = frame.point((line.label, line.label), ("x", "y"))[index]
            assert shown == labelled


def test_a_grid_is_not_labelled_in_zoom_coordinates() -> None:
    with pytest.raises(InvalidArgs) as error:
        grid_for(Frame.zoom(SCREEN, (1280, 800)), SCREEN, (1280, 800))
    assert _field(error) == "coordinates"
