"""Coordinate frames of the screen tool: what a request's numbers mean in screen pixels.

Pure arithmetic shared by the server, which converts every coordinate of a ``screen`` request to
screen pixels once, before the stale-screen guard, and the screen service on every display,
which places a grid's lines with the same mapping. The rounding (``docs/screen-tool.md``):

- **normalized** ``v`` (0..1000) across an extent of ``L`` pixels from ``o``: the pixel that
  holds the position ``v / 1000`` of the extent, ``o + floor(v * L / 1000)``; ``v = 1000`` (the
  far edge) is the last pixel, ``o + L - 1``.
- **zoom** pixel ``z`` of a zoom image ``W`` pixels wide showing ``L`` screen pixels from ``o``:
  the screen pixel under the centre of ``z``, ``o + floor((z + 0.5) * L / W)``.
- **boxes** (a zoom region, a target box): left and top edges by floor, right and bottom by
  ceiling, so the pixel box covers every pixel the box touches.

Arithmetic is exact (``fractions``): the same numbers give the same pixel everywhere.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Final, Literal, get_args

from wire.errors import InvalidArgs
from wire.guard import CropRect

Coordinates = Literal["pixels", "normalized", "zoom"]
COORDINATES: Final[tuple[Coordinates, ...]] = get_args(Coordinates)
GridCoordinates = Literal["pixels", "normalized"]
NORMALIZED_MAX: Final = 1000

MIN_SCALE, MAX_SCALE = 1, 4
# A zoom image is at most 4096 px a side and 4 Mpx: twice a 1920x1080 screenshot.
MAX_ZOOM_SIDE: Final = 4096
MAX_ZOOM_PIXELS: Final = 2048 * 2048

# Grid lines sit at least this many image pixels apart, on the first "round" step that does.
MIN_GRID_SPACING: Final = 80
GRID_STEPS: Final = (1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 5000)

Number = int | float


def _integer(value: object, field: str, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise InvalidArgs(field, f"must be an integer ({what})")
    return value


def _normalized(value: object, field: str) -> Fraction:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InvalidArgs(field, "must be a number from 0 to 1000 (normalized coordinates)")
    if not 0 <= value <= NORMALIZED_MAX:
        raise InvalidArgs(field, f"{value:g} is outside 0..1000 (normalized coordinates)")
    return Fraction(value)


@dataclass(frozen=True)
class Axis:
    """One axis of a frame: ``units`` numbers span ``length`` screen pixels from ``origin``."""

    coordinates: Coordinates
    origin: int = 0
    length: int = 0
    units: int = 0  # 1000 (normalized), the zoom image's width or height (zoom)

    def pixel(self, value: object, field: str) -> int:
        """The screen pixel a coordinate names (never clamped; pixels are checked later)."""
        kind = self.coordinates
        if kind == "pixels":
            return _integer(value, field, "a screen pixel")
        if kind == "normalized":
            at = _normalized(value, field) * self.length / NORMALIZED_MAX
            return self.origin + min(self.length - 1, math.floor(at))
        z = _integer(value, field, "a pixel of the zoom image")
        if not 0 <= z < self.units:
            raise InvalidArgs(field, f"{z} is outside the zoom image (0..{self.units - 1})")
        return self.origin + (2 * z + 1) * self.length // (2 * self.units)

    def span(self, start: object, size: object, fields: tuple[str, str]) -> tuple[int, int]:
        """``(first pixel, pixel count)`` of the stretch ``start .. start + size``."""
        kind = self.coordinates
        if kind == "pixels":
            first = _integer(start, fields[0], "a screen pixel")
            count = _integer(size, fields[1], "screen pixels")
            if count <= 0:
                raise InvalidArgs(fields[1], "must be positive")
            return first, count
        units = NORMALIZED_MAX if kind == "normalized" else self.units
        low, extent = self._amount(start, fields[0]), self._amount(size, fields[1])
        if extent <= 0:
            raise InvalidArgs(fields[1], "must be positive")
        if low + extent > units:
            side = fields[1].rsplit(".", 1)[-1]
            raise InvalidArgs(fields[1], f"reaches past {units}: {fields[0]} + {side} <= {units}")
        left = math.floor(low * self.length / units)
        right = math.ceil((low + extent) * self.length / units)
        return self.origin + left, right - left

    def _amount(self, value: object, field: str) -> Fraction:
        if self.coordinates == "normalized":
            return _normalized(value, field)
        amount = _integer(value, field, "pixels of the zoom image")
        if not 0 <= amount <= self.units:
            raise InvalidArgs(field, f"{amount} is outside the zoom image (0..{self.units})")
        return Fraction(amount)


@dataclass(frozen=True)
class Frame:
    """What a request's numbers mean.

    ``pixels``: screen pixels. ``normalized``: 0..1000 across ``area`` (the whole screen, or the
    request's ``relative_to``). ``zoom``: pixels of a zoom image of ``image`` size showing
    ``area``.
    """

    coordinates: Coordinates
    area: CropRect | None = None
    image: tuple[int, int] | None = None

    @classmethod
    def pixels(cls) -> Frame:
        return cls("pixels")

    @classmethod
    def normalized(cls, area: CropRect) -> Frame:
        return cls("normalized", area)

    @classmethod
    def zoom(cls, region: CropRect, image: tuple[int, int]) -> Frame:
        return cls("zoom", region, image)

    def axis(self, index: int) -> Axis:
        """Axis 0 (x) or 1 (y)."""
        if self.area is None:
            return Axis(self.coordinates)
        origin = (self.area.x, self.area.y)[index]
        length = (self.area.width, self.area.height)[index]
        units = NORMALIZED_MAX if self.image is None else self.image[index]
        return Axis(self.coordinates, origin, length, units)

    def point(self, values: tuple[object, object], fields: tuple[str, str]) -> tuple[int, int]:
        """Screen pixels of a point."""
        return self.axis(0).pixel(values[0], fields[0]), self.axis(1).pixel(values[1], fields[1])

    def box(self, values: tuple[object, object, object, object], field: str) -> CropRect:
        """Screen pixels of a box ``(x, y, width, height)``; errors name ``field.x`` etc."""
        x, width = self.axis(0).span(values[0], values[2], (f"{field}.x", f"{field}.width"))
        y, height = self.axis(1).span(values[1], values[3], (f"{field}.y", f"{field}.height"))
        return CropRect(x, y, width, height)


# -- zoom ----------------------------------------------------------------------------------------


def zoom_size(width: int, height: int, scale: Number) -> tuple[int, int]:
    """The image size of a ``width`` x ``height`` region at ``scale`` (sides rounded half up);
    a scale out of range, or an image over the zoom's limits, is ``InvalidArgs("scale")``."""
    if isinstance(scale, bool) or not isinstance(scale, int | float) or not math.isfinite(scale):
        raise InvalidArgs("scale", f"must be a number from {MIN_SCALE} to {MAX_SCALE}")
    if not MIN_SCALE <= scale <= MAX_SCALE:
        raise InvalidArgs("scale", f"{scale:g} is outside {MIN_SCALE}..{MAX_SCALE}")
    factor = Fraction(scale)
    out = (
        max(1, math.floor(width * factor + Fraction(1, 2))),
        max(1, math.floor(height * factor + Fraction(1, 2))),
    )
    if max(out) > MAX_ZOOM_SIDE or out[0] * out[1] > MAX_ZOOM_PIXELS:
        fits = min(
            MAX_ZOOM_SIDE / max(width, height), math.sqrt(MAX_ZOOM_PIXELS / (width * height))
        )
        advice = (
            f"at most {math.floor(fits * 100) / 100:g} fits this region"
            if fits >= MIN_SCALE
            else "zoom a smaller region"
        )
        raise InvalidArgs(
            "scale",
            f"{scale:g} makes a {out[0]}x{out[1]} image, over the zoom's limit of "
            f"{MAX_ZOOM_SIDE} px a side and {MAX_ZOOM_PIXELS:,} pixels; {advice}",
        )
    return out


def image_position(pixel: int, origin: int, length: int, image_length: int) -> int:
    """The image column (or row) showing the centre of screen ``pixel`` in an image of
    ``image_length`` showing ``length`` pixels from ``origin`` (a screenshot: the pixel)."""
    return (2 * (pixel - origin) + 1) * image_length // (2 * length)


# -- grid ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GridLine:
    """A line of the grid: where it is drawn in the image, and its label."""

    position: int
    label: int


@dataclass(frozen=True)
class Grid:
    """Lines to draw on an image: ``columns`` (constant x) and ``rows`` (constant y)."""

    coordinates: GridCoordinates
    step: int
    columns: tuple[GridLine, ...]
    rows: tuple[GridLine, ...]

    def to_dict(self) -> dict[str, object]:
        return {"coordinates": self.coordinates, "step": self.step}


def _step(frame: Frame, region: CropRect, image: tuple[int, int]) -> int:
    """The first round step whose lines sit at least ``MIN_GRID_SPACING`` apart on both axes."""
    needed = 1.0
    for index, (length, image_length) in enumerate(
        ((region.width, image[0]), (region.height, image[1]))
    ):
        per_unit = 1.0 if frame.area is None else frame.axis(index).length / NORMALIZED_MAX
        needed = max(needed, MIN_GRID_SPACING * length / (image_length * per_unit))
    limit = NORMALIZED_MAX if frame.coordinates == "normalized" else GRID_STEPS[-1]
    return next((s for s in GRID_STEPS if s >= needed and s <= limit), limit)


def _lines(
    frame: Frame, index: int, step: int, region: CropRect, image_length: int
) -> tuple[GridLine, ...]:
    origin = (region.x, region.y)[index]
    length = (region.width, region.height)[index]
    if frame.coordinates == "normalized":
        axis = frame.axis(index)
        pairs = ((axis.pixel(v, "grid"), v) for v in range(0, NORMALIZED_MAX + 1, step))
    else:
        first = -(-origin // step) * step
        pairs = ((p, p) for p in range(first, origin + length, step))
    return tuple(
        GridLine(image_position(pixel, origin, length, image_length), label)
        for pixel, label in pairs
        if origin <= pixel < origin + length
    )


def grid_for(frame: Frame, region: CropRect, image: tuple[int, int]) -> Grid:
    """The grid of an image of ``image`` size showing ``region`` of the screen, labelled in
    ``frame``'s coordinates (screen pixels, or normalized across its area)."""
    if frame.coordinates == "zoom":
        raise InvalidArgs("coordinates", "a grid is labelled in pixels or normalized coordinates")
    step = _step(frame, region, image)
    coordinates: GridCoordinates = frame.coordinates
    return Grid(
        coordinates,
        step,
        _lines(frame, 0, step, region, image[0]),
        _lines(frame, 1, step, region, image[1]),
    )
