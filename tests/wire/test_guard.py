"""Stale-screen guard: crop geometry vectors, properties, and the score."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from wire import guard
from wire.errors import ErrorCode, InvalidArgs, OpError
from wire.guard import CropRect, compare, crop_rect, decode_crop, encode_crop

pytestmark = pytest.mark.unit

SCREEN = (1280, 800)


@pytest.mark.parametrize(
    ("point", "size", "bbox", "expected"),
    [
        # centre: 128x96 around the point
        ((640, 400), SCREEN, None, CropRect(576, 352, 128, 96)),
        # top-left corner: intersected with the image, not shifted
        ((0, 0), SCREEN, None, CropRect(0, 0, 64, 48)),
        ((10, 20), SCREEN, None, CropRect(0, 0, 74, 68)),
        # bottom-right edge
        ((1279, 799), SCREEN, None, CropRect(1215, 751, 65, 49)),
        # small box: margin 16 (minimum)
        ((105, 105), SCREEN, (100, 100, 20, 10), CropRect(84, 84, 52, 42)),
        # 120 px box: margin 120 // 4 = 30
        ((150, 120), SCREEN, (100, 100, 120, 40), CropRect(70, 70, 180, 100)),
        # big box: margin capped at 48
        ((300, 300), SCREEN, (100, 100, 400, 300), CropRect(52, 52, 496, 396)),
        # box near the edge: clamped to the image
        ((5, 5), SCREEN, (0, 0, 40, 40), CropRect(0, 0, 56, 56)),
        # huge box: each side at most 512 px from the point
        ((1000, 700), (2000, 1500), (0, 0, 2000, 1500), CropRect(488, 188, 1024, 1024)),
    ],
)
def test_crop_rect_vectors(point, size, bbox, expected):
    assert crop_rect(point, size, bbox) == expected


def test_bbox_must_contain_point():
    with pytest.raises(InvalidArgs) as info:
        crop_rect((10, 10), SCREEN, (100, 100, 20, 20))
    assert info.value.code is ErrorCode.INVALID_ARGS
    assert info.value.details == {"field": "target_bbox"}


def test_bbox_right_edge_is_exclusive():
    with pytest.raises(InvalidArgs):
        crop_rect((120, 105), SCREEN, (100, 100, 20, 10))


@pytest.mark.parametrize("bbox", [(0, 0, 0, 10), (0, 0, 10, -1)])
def test_bbox_needs_positive_size(bbox):
    with pytest.raises(InvalidArgs):
        crop_rect((0, 0), SCREEN, bbox)


@pytest.mark.parametrize("point", [(-1, 0), (0, -1), (1280, 0), (0, 800)])
def test_point_outside_image(point):
    with pytest.raises(InvalidArgs):
        crop_rect(point, SCREEN)


@st.composite
def geometry(draw):
    w = draw(st.integers(1, 4000))
    h = draw(st.integers(1, 4000))
    px = draw(st.integers(0, w - 1))
    py = draw(st.integers(0, h - 1))
    bbox = None
    if draw(st.booleans()):
        bx = draw(st.integers(px - 3000, px))
        by = draw(st.integers(py - 3000, py))
        bw = draw(st.integers(px - bx + 1, px - bx + 3000))
        bh = draw(st.integers(py - by + 1, py - by + 3000))
        bbox = (bx, by, bw, bh)
    return (px, py), (w, h), bbox


@given(geometry())
def test_rect_inside_image_and_contains_point(args):
    point, size, bbox = args
    rect = crop_rect(point, size, bbox)
    assert rect.width > 0
    assert rect.height > 0
    assert rect.x >= 0
    assert rect.y >= 0
    assert rect.fits(size)
    assert rect.contains(point)
    assert rect.width <= 2 * guard.MAX_SIDE_FROM_POINT
    assert rect.height <= 2 * guard.MAX_SIDE_FROM_POINT


def _noise_image(seed: int, h: int = 96, w: int = 128) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def test_identical_crops_score_zero():
    image = _noise_image(1)
    result = compare(image, image.copy())
    assert result.score == 0.0
    assert not result.stale
    assert result.threshold == guard.STALE_THRESHOLD


def test_fully_changed_crop_is_stale():
    before = np.zeros((96, 128, 3), np.uint8)
    after = np.full((96, 128, 3), 255, np.uint8)
    result = compare(before, after)
    assert result.stale
    assert result.score == 1.0
    assert result.changed_ratio == 1.0


def test_small_noise_is_not_stale():
    rng = np.random.default_rng(7)
    before = _noise_image(2)
    jitter = rng.integers(-3, 4, before.shape)
    after = np.clip(before.astype(int) + jitter, 0, 255).astype(np.uint8)
    result = compare(before, after)
    assert not result.stale
    assert 0 < result.score < guard.STALE_THRESHOLD


def test_small_changed_patch_below_threshold():
    before = np.zeros((96, 128, 3), np.uint8)
    after = before.copy()
    after[:8, :8] = 255  # 64 of 12,288 pixels: a blinking cursor, say
    assert not compare(before, after).stale


def test_button_turning_into_dialog_is_stale():
    before = np.full((96, 128, 3), 200, np.uint8)
    after = before.copy()
    after[20:70, 20:110] = 40
    result = compare(before, after)
    assert result.stale
    assert result.changed_ratio == pytest.approx(50 * 90 / (96 * 128))


def test_shape_mismatch_is_stale():
    assert compare(_noise_image(3), _noise_image(3, h=90)).stale


def test_large_crops_compared_after_fit():
    before = _noise_image(4, h=1024, w=600)
    result = compare(before, before.copy())
    assert result.score == 0.0
    assert guard.fit_size(600, 1024) == (150, 256)
    assert guard.fit_size(1024, 2) == (256, 1)
    assert guard.fit_size(300, 200) == (150, 100)


def test_large_crop_change_detected_after_fit():
    before = np.zeros((1000, 1000, 3), np.uint8)
    after = before.copy()
    after[400:600, 400:600] = 255  # a 200x200 dialog in a big target box: 4% of the area
    result = compare(before, after)
    assert result.changed_ratio == pytest.approx(0.04, abs=0.005)
    after[100:500, 100:500] = 255
    assert compare(before, after).stale


def test_compare_rejects_wrong_dtype():
    with pytest.raises(ValueError, match="uint8"):
        compare(np.zeros((4, 4, 3), np.float32), np.zeros((4, 4, 3), np.float32))


def test_resize_area_sums_blocks():
    image = np.zeros((4, 4, 3), np.uint8)
    image[:2, :2] = 200
    small = guard.resize_area(image, limit=2)
    assert small.shape == (2, 2, 3)
    assert small[0, 0, 0] == 800
    assert small[1, 1, 0] == 0


def test_resize_area_non_integer_ratio_keeps_mean():
    image = _noise_image(5, h=970, w=1031)
    small = guard.resize_area(image)
    assert small.shape[:2] == guard.fit_size(1031, 970)[::-1]
    assert abs(float(small.mean()) / 25 - float(image.mean())) < 2.0


@given(st.integers(1, 40), st.integers(1, 40), st.integers(0, 2**32 - 1))
def test_crop_round_trip(w, h, seed):
    image = _noise_image(seed, h=h, w=w)
    encoded = encode_crop(image)
    assert encoded["width"] == w
    assert encoded["height"] == h
    assert np.array_equal(decode_crop(encoded), image)


@pytest.mark.parametrize(
    "bad",
    [
        None,
        {"encoding": "png", "width": 1, "height": 1, "data": "AAAA"},
        {"width": 0, "height": 1, "data": ""},
        {"width": 2, "height": 1, "data": "AAAA"},
        {"width": 1, "height": 1, "data": "!!!!"},
        {"width": 1, "height": 1, "data": 5},
        {"width": 4096, "height": 4096, "data": ""},
    ],
)
def test_decode_crop_rejects_malformed(bad):
    with pytest.raises(InvalidArgs) as info:
        decode_crop(bad)
    assert info.value.details == {"field": "guard.crop"}


def test_rect_from_dict():
    assert CropRect.from_dict({"x": 1, "y": 2, "width": 3, "height": 4}) == CropRect(1, 2, 3, 4)
    with pytest.raises(InvalidArgs):
        CropRect.from_dict({"x": 1, "y": 2, "width": 0, "height": 4})
    with pytest.raises(InvalidArgs):
        CropRect.from_dict({"x": True, "y": 2, "width": 1, "height": 4})


def test_cut_copies_region():
    image = _noise_image(6, h=50, w=60)
    rect = CropRect(10, 5, 20, 7)
    piece = guard.cut(image, rect)
    assert piece.shape == (7, 20, 3)
    assert np.array_equal(piece, image[5:12, 10:30])
    with pytest.raises(InvalidArgs):
        guard.cut(image, CropRect(50, 0, 20, 7))


# -- the digest a guard may carry instead of its crop ------------------------------------------


def _guard_wire(reference: np.ndarray, *, digest: bool) -> dict[str, object]:
    height, width = reference.shape[:2]
    rect = {"x": 0, "y": 0, "width": width, "height": height}
    if digest:
        return {"digest": guard.crop_digest(reference), "rect": rect}
    return {"crop": encode_crop(reference), "rect": rect}


def test_a_digest_passes_exactly_the_region_it_was_taken_of():
    reference = _noise_image(7, h=96, w=128)
    checked = guard.Guard.from_wire(_guard_wire(reference, digest=True))
    verdict = checked.judge(reference.copy())
    assert (verdict["checked"], verdict["difference"], verdict["stale"]) == (True, 0.0, False)


def test_one_changed_pixel_asks_for_the_crop_which_then_lets_it_pass():
    reference = _noise_image(8, h=96, w=128)
    now = reference.copy()
    now[40, 60] ^= 0xFF  # a caret's worth: well under the threshold
    with pytest.raises(OpError) as caught:
        guard.Guard.from_wire(_guard_wire(reference, digest=True)).judge(now)
    assert caught.value.code is ErrorCode.STALE_SCREEN
    assert caught.value.details["reason"] == guard.DIGEST_DIFFERS
    verdict = guard.Guard.from_wire(_guard_wire(reference, digest=False)).judge(now)
    assert verdict["stale"] is False and verdict["difference"] > 0


@pytest.mark.parametrize(
    ("value", "field"),
    [
        (
            {"digest": "b2b128:" + "0" * 31, "rect": {"x": 0, "y": 0, "width": 1, "height": 1}},
            "guard.digest",
        ),
        (
            {"digest": "sha1:" + "0" * 32, "rect": {"x": 0, "y": 0, "width": 1, "height": 1}},
            "guard.digest",
        ),
        ({"digest": 7, "rect": {"x": 0, "y": 0, "width": 1, "height": 1}}, "guard.digest"),
        (
            {
                "digest": "b2b128:" + "0" * 32,
                "crop": encode_crop(np.zeros((1, 1, 3), np.uint8)),
                "rect": {"x": 0, "y": 0, "width": 1, "height": 1},
            },
            "guard",
        ),
        ({"digest": "b2b128:" + "0" * 32}, "guard.rect"),
    ],
)
def test_a_malformed_digest_guard_names_its_field(value, field):
    with pytest.raises(InvalidArgs) as info:
        guard.Guard.from_wire(value)
    assert info.value.details == {"field": field}
