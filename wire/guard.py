"""The stale-screen guard: which region to compare, and how different it may be.

Pure computation shared by the server (cuts the reference crop from the kept capture) and the
screen service on every display (captures the same region just before input and compares:
:class:`Guard`). The algorithm and its defaults are explained in ``docs/screen-tool.md``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from wire.errors import ErrorCode, InvalidArgs, OpError

RGBArray = npt.NDArray[np.uint8]

STALE_THRESHOLD = 0.06
CHANGED_PIXEL_DELTA = 24
COMPARE_SIZE = 256

DEFAULT_CROP_WIDTH = 128
DEFAULT_CROP_HEIGHT = 96
MAX_SIDE_FROM_POINT = 512
MIN_BBOX_MARGIN = 16
MAX_BBOX_MARGIN = 48
CROP_ENCODING = "rgb24"
# A guard crop is at most 1024x1024 by construction; anything larger is not ours.
MAX_CROP_PIXELS = (2 * MAX_SIDE_FROM_POINT) ** 2
# A guard may carry the crop's digest instead of the crop (relays announcing this capability):
# an unchanged region then needs no pixels on the wire and no comparison; any other region is
# answered DIGEST_DIFFERS and the server sends the crop itself.
DIGEST_CAPABILITY = "screen_guard_digest"
DIGEST_DIFFERS = "digest_differs"
_DIGEST_PREFIX = "b2b128:"
_DIGEST_RE = re.compile(rf"{_DIGEST_PREFIX}[0-9a-f]{{32}}")


@dataclass(frozen=True)
class CropRect:
    """A region of the screen in full-resolution pixels (``x``/``y`` inclusive, size > 0)."""

    x: int
    y: int
    width: int
    height: int

    def to_dict(self) -> dict[str, int]:
        return {"x": self.x, "y": self.y, "width": self.width, "height": self.height}

    @classmethod
    def from_dict(cls, data: Any, field: str = "rect") -> CropRect:
        """Parse ``{x, y, width, height}``; raise ``InvalidArgs`` naming ``field``."""
        if not isinstance(data, dict):
            raise InvalidArgs(field, "must be an object with x, y, width, height")
        values: list[int] = []
        for key in ("x", "y", "width", "height"):
            value = data.get(key)
            if not isinstance(value, int) or isinstance(value, bool):
                raise InvalidArgs(field, "x, y, width and height must be integers")
            values.append(value)
        rect = cls(*values)
        if rect.x < 0 or rect.y < 0 or rect.width <= 0 or rect.height <= 0:
            raise InvalidArgs(field, "must have x, y >= 0 and a positive size")
        return rect

    def contains(self, point: tuple[int, int]) -> bool:
        px, py = point
        return self.x <= px < self.x + self.width and self.y <= py < self.y + self.height

    def fits(self, image_size: tuple[int, int]) -> bool:
        """True when the rect lies inside an image of ``(width, height)``."""
        w, h = image_size
        return self.x + self.width <= w and self.y + self.height <= h


@dataclass(frozen=True)
class GuardResult:
    """Outcome of one comparison; ``score`` is what the threshold applies to."""

    score: float
    stale: bool
    threshold: float
    mean_abs_delta: float
    changed_ratio: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "difference": round(self.score, 4),
            "threshold": self.threshold,
            "mean_abs_delta": round(self.mean_abs_delta, 4),
            "changed_ratio": round(self.changed_ratio, 4),
            "stale": self.stale,
        }


def bbox_margin(width: int, height: int) -> int:
    """Margin added around a target box: a quarter of its long side, within 16..48 px."""
    return max(MIN_BBOX_MARGIN, min(MAX_BBOX_MARGIN, max(width, height) // 4))


def _check_point(point: tuple[int, int], image_size: tuple[int, int]) -> None:
    px, py = point
    w, h = image_size
    if w <= 0 or h <= 0:
        raise InvalidArgs("image_size", "must be positive")
    if not (0 <= px < w and 0 <= py < h):
        raise InvalidArgs("point", f"({px}, {py}) is outside the {w}x{h} screen")


def _bbox_edges(
    point: tuple[int, int], target_bbox: tuple[int, int, int, int]
) -> tuple[int, int, int, int]:
    bx, by, bw, bh = target_bbox
    if bw <= 0 or bh <= 0:
        raise InvalidArgs("target_bbox", "width and height must be positive")
    if not CropRect(bx, by, bw, bh).contains(point):
        raise InvalidArgs("target_bbox", f"point {point} is not inside the box")
    m = bbox_margin(bw, bh)
    return bx - m, by - m, bx + bw + m, by + bh + m


def crop_rect(
    point: tuple[int, int],
    image_size: tuple[int, int],
    target_bbox: tuple[int, int, int, int] | None = None,
) -> CropRect:
    """The region whose pixels guard an action at ``point`` on an image of ``(w, h)``."""
    _check_point(point, image_size)
    px, py = point
    if target_bbox is None:
        left, top = px - DEFAULT_CROP_WIDTH // 2, py - DEFAULT_CROP_HEIGHT // 2
        right, bottom = left + DEFAULT_CROP_WIDTH, top + DEFAULT_CROP_HEIGHT
    else:
        left, top, right, bottom = _bbox_edges(point, target_bbox)
    # A huge box would make any change anywhere in it block the click, and cost time;
    # the pixels near the point are the ones that matter.
    left, right = max(left, px - MAX_SIDE_FROM_POINT), min(right, px + MAX_SIDE_FROM_POINT)
    top, bottom = max(top, py - MAX_SIDE_FROM_POINT), min(bottom, py + MAX_SIDE_FROM_POINT)
    # Clamping intersects with the image (the crop shrinks at edges rather than shifting),
    # so the point keeps its place relative to the box the caller meant.
    w, h = image_size
    left, top = max(0, left), max(0, top)
    right, bottom = min(w, right), min(h, bottom)
    return CropRect(left, top, right - left, bottom - top)


def cut(image: RGBArray, rect: CropRect) -> RGBArray:
    """The pixels of ``rect`` from an HxWx3 image (a copy, so the image may be freed)."""
    if not rect.fits((image.shape[1], image.shape[0])):
        raise InvalidArgs("rect", "is outside the image")
    return image[rect.y : rect.y + rect.height, rect.x : rect.x + rect.width].copy()


def shrink_factors(width: int, height: int, limit: int = COMPARE_SIZE) -> tuple[int, int]:
    """Integer (x, y) block sizes that fit ``width``x``height`` into ``limit`` (same for both
    axes, so aspect is kept, unless a side is thinner than the block)."""
    factor = max(1, -(-max(width, height) // limit))
    return min(factor, width), min(factor, height)


def fit_size(width: int, height: int, limit: int = COMPARE_SIZE) -> tuple[int, int]:
    """Size after :func:`resize_area` fits a crop into ``limit``x``limit`` (never upscaled)."""
    fx, fy = shrink_factors(width, height, limit)
    return width // fx, height // fy


def resize_area(image: RGBArray, limit: int = COMPARE_SIZE) -> npt.NDArray[np.uint32]:
    """Integer-factor box filter: each output pixel is the sum of a ``fx``x``fy`` block.

    Pure numpy reshape-and-sum (area averaging without the division, which cancels in the
    comparison). The last ``< fx`` columns / ``< fy`` rows are dropped: a few edge pixels of
    a crop that has a margin of at least 16 px around the target anyway.
    """
    src_h, src_w = image.shape[:2]
    fx, fy = shrink_factors(src_w, src_h, limit)
    width, height = src_w // fx, src_h // fy
    block = image[: height * fy, : width * fx]
    dtype = np.uint16 if fx * fy * 255 < 2**16 else np.uint32
    rows = block.reshape(height, fy, width * fx * 3).sum(axis=1, dtype=dtype)
    summed: npt.NDArray[np.uint32] = rows.reshape(height, width, fx, 3).sum(axis=2, dtype=np.uint32)
    return summed


def _check_rgb(name: str, array: RGBArray) -> None:
    if array.ndim != 3 or array.shape[2] != 3 or array.dtype != np.uint8:
        raise ValueError(f"{name} must be an HxWx3 uint8 array, got {array.shape} {array.dtype}")


def compare(reference: RGBArray, current: RGBArray) -> GuardResult:
    """Score how much ``current`` differs from ``reference`` (0 same .. 1 all changed)."""
    _check_rgb("reference", reference)
    _check_rgb("current", current)
    if reference.shape != current.shape or reference.size == 0:
        # A different size means the screen geometry changed: nothing to compare against.
        return GuardResult(1.0, True, STALE_THRESHOLD, 1.0, 1.0)
    if np.array_equal(reference, current):
        # The usual case, an unchanged screen: a memory compare instead of the scoring below.
        return GuardResult(0.0, False, STALE_THRESHOLD, 0.0, 0.0)
    fx, fy = shrink_factors(reference.shape[1], reference.shape[0])
    delta: npt.NDArray[np.floating[Any]] | npt.NDArray[np.int16]
    if fx == fy == 1:
        # Already small enough (the default 128x96 crop): exact integer deltas, no resize.
        delta = np.abs(reference.astype(np.int16) - current.astype(np.int16))
    else:
        ref, cur = resize_area(reference), resize_area(current)
        delta = np.abs(ref.astype(np.float32) - cur.astype(np.float32)) / (fx * fy)
    mean_abs_delta = float(delta.mean()) / 255.0
    changed_ratio = float((delta.max(axis=2) >= CHANGED_PIXEL_DELTA).mean())
    score = min(1.0, max(2.0 * mean_abs_delta, changed_ratio))
    stale = score > STALE_THRESHOLD
    return GuardResult(score, stale, STALE_THRESHOLD, mean_abs_delta, changed_ratio)


def encode_crop(array: RGBArray) -> dict[str, Any]:
    """Raw RGB crop → JSON-safe ``{encoding, width, height, data: base64}``."""
    _check_rgb("crop", array)
    height, width = array.shape[:2]
    data = base64.b64encode(np.ascontiguousarray(array).tobytes()).decode("ascii")
    return {"encoding": CROP_ENCODING, "width": width, "height": height, "data": data}


def crop_digest(array: RGBArray) -> str:
    """``guard.digest`` of a crop: BLAKE2b-128 of its raw RGB bytes, row after row."""
    _check_rgb("crop", array)
    digest = hashlib.blake2b(np.ascontiguousarray(array).tobytes(), digest_size=16)
    return _DIGEST_PREFIX + digest.hexdigest()


def _crop_dims(data: dict[str, Any], field: str) -> tuple[int, int]:
    width, height = data.get("width"), data.get("height")
    if not isinstance(width, int) or not isinstance(height, int) or width <= 0 or height <= 0:
        raise InvalidArgs(field, "width and height must be positive integers")
    if width * height > MAX_CROP_PIXELS:
        raise InvalidArgs(field, f"{width}x{height} is larger than a guard crop can be")
    return width, height


def decode_crop(data: Any, field: str = "guard.crop") -> RGBArray:
    """Inverse of :func:`encode_crop`; malformed input raises ``InvalidArgs`` naming ``field``."""
    if not isinstance(data, dict) or data.get("encoding", CROP_ENCODING) != CROP_ENCODING:
        raise InvalidArgs(field, f"must be an object with encoding {CROP_ENCODING!r}")
    width, height = _crop_dims(data, field)
    payload = data.get("data")
    if not isinstance(payload, str):
        raise InvalidArgs(field, "data must be a base64 string")
    try:
        raw = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as err:
        raise InvalidArgs(field, "data is not valid base64") from err
    if len(raw) != width * height * 3:
        raise InvalidArgs(field, f"data has {len(raw)} bytes, expected {width * height * 3}")
    return np.frombuffer(raw, dtype=np.uint8).reshape(height, width, 3).copy()


@dataclass(frozen=True)
class Guard:
    """The reference a guarded action carries (``guard: {crop, rect}``, or ``{digest, rect}``
    from a server that expects the region unchanged), and its verdict.

    The screen service checks, in order: :meth:`from_wire` (shape), :meth:`region_at` (the
    point and the current screen), then captures that region and calls :meth:`judge`. Every
    refusal happens before the first input event.
    """

    crop: RGBArray | None
    rect: CropRect
    digest: str | None = None

    @classmethod
    def from_wire(cls, value: Any) -> Guard:
        """Parse ``{crop, rect}`` or ``{digest, rect}``; malformed → ``InvalidArgs`` naming
        the field."""
        if not isinstance(value, dict):
            raise InvalidArgs("guard", "must be an object with crop and rect")
        rect = CropRect.from_dict(value.get("rect"), "guard.rect")
        if "digest" in value:
            if "crop" in value:
                raise InvalidArgs("guard", "carries a crop or its digest, not both")
            digest = value["digest"]
            if not isinstance(digest, str) or not _DIGEST_RE.fullmatch(digest):
                raise InvalidArgs("guard.digest", f"must be {_DIGEST_PREFIX} and 32 hex digits")
            return cls(None, rect, digest)
        crop = decode_crop(value.get("crop"), "guard.crop")
        if crop.shape[:2] != (rect.height, rect.width):
            raise InvalidArgs("guard.crop", "size differs from guard.rect")
        return cls(crop, rect)

    @classmethod
    def required(cls, value: Any) -> Guard:
        """Like :meth:`from_wire`, refusing an action that carries no guard at all."""
        if value is None:
            # Only the server holds the screenshot a click was chosen on: an action without
            # its reference crop could not have been checked, so it does not run.
            problem = "required: a click or drag runs only behind the screen guard"
            raise InvalidArgs("guard", problem)
        return cls.from_wire(value)

    def region_at(self, point: tuple[int, int], screen_size: tuple[int, int]) -> CropRect:
        """The region to capture now; a screen that no longer holds it is stale."""
        if not self.rect.contains(point):
            raise InvalidArgs("guard.rect", f"does not contain the point {point}")
        if not self.rect.fits(screen_size):
            details = {"difference": 1.0, "threshold": STALE_THRESHOLD}
            raise OpError(ErrorCode.STALE_SCREEN, "the screen size changed", details)
        return self.rect

    def judge(self, current: RGBArray) -> dict[str, Any]:
        """Compare with the region as captured now: the result figures, or ``STALE_SCREEN``
        (with a digest: reason ``digest_differs`` unless the region is exactly as captured)."""
        if self.crop is None:
            if crop_digest(current) != self.digest:
                raise OpError(
                    ErrorCode.STALE_SCREEN,
                    "the region differs from the screenshot's: the crop is needed to judge it",
                    {"reason": DIGEST_DIFFERS, "rect": self.rect.to_dict()},
                )
            unchanged = GuardResult(0.0, False, STALE_THRESHOLD, 0.0, 0.0)
            return {"checked": True, **unchanged.to_dict()}
        result = compare(self.crop, current)
        if result.stale:
            raise OpError(
                ErrorCode.STALE_SCREEN,
                "the screen changed around the target since the screenshot; take a new one",
                {**result.to_dict(), "rect": self.rect.to_dict()},
            )
        return {"checked": True, **result.to_dict()}
