"""The screenshot format: a PNG whose pixels are deflated in independent bands of rows.

One encoding serves two readers. The agent gets an ordinary PNG (8-bit RGB, every row with
filter type 0). The server keeps the same PNG, as the base64 text it arrived in
(:class:`Base64BandedPng`), as the full-resolution capture behind a screen revision: each
band of :data:`BAND_ROWS` rows ends with a zlib full flush, so the deflate data of one band
decompresses on its own, and ``offsets`` (where each band starts in the file, plus where the
last one ends) let the guard decode and decompress just the rows a crop needs.

Bands are compressed independently, so the relay compresses them in parallel (callers pass
a ``map`` that runs band jobs on threads; zlib and numpy copies release the GIL). The zlib
stream's Adler-32 is combined from the bands' own checksums. Why this and not Pillow's
encoder: ``docs/screen-tool.md``.
"""

from __future__ import annotations

import base64
import binascii
import itertools
import struct
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Literal, Self

import numpy as np
import numpy.typing as npt

from wire.errors import ErrorCode, InvalidArgs, OpError
from wire.guard import CropRect, RGBArray

CAPTURE_ENCODING = "png-bands"
BAND_ROWS = 64
# Desktop pictures are flat colours and text: level 1 deflates them to ~2 % of their size.
ZLIB_LEVEL = 1
MAX_CAPTURE_PIXELS = 16384 * 16384
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_ZLIB_HEADER = b"\x78\x01"  # deflate, 32 KiB window, fastest-compression hint
_ADLER_BASE = 65521
_IHDR_CHUNK_BYTES = 8 + 13 + 4
# Where the first band's deflate data starts: signature, IHDR, IDAT length + tag, zlib header.
FIRST_BAND_OFFSET = len(PNG_SIGNATURE) + _IHDR_CHUNK_BYTES + 8 + len(_ZLIB_HEADER)

PixelOrder = Literal["BGRA", "RGB"]
Band = tuple[bytes, int, int]  # (deflate data, Adler-32 of the raw rows, raw size)
BandMap = Callable[[Callable[[int], Band], Iterable[int]], Iterator[Band]]


def adler32_combine(first: int, second: int, second_length: int) -> int:
    """Adler-32 of ``a + b`` from ``adler32(a)``, ``adler32(b)`` and ``len(b)`` (zlib's own)."""
    remainder = second_length % _ADLER_BASE
    sum1 = first & 0xFFFF
    sum2 = (remainder * sum1) % _ADLER_BASE
    sum1 += (second & 0xFFFF) + _ADLER_BASE - 1
    sum2 += (first >> 16) + (second >> 16) + _ADLER_BASE - remainder
    return (sum1 % _ADLER_BASE) | ((sum2 % _ADLER_BASE) << 16)


def _chunk(tag: bytes, body: bytes) -> bytes:
    return struct.pack("!I", len(body)) + tag + body + struct.pack("!I", zlib.crc32(tag + body))


class _Bands:
    """Reading rows out of a banded PNG, whatever holds its bytes (see the two forms below)."""

    width: int
    height: int
    band_rows: int
    offsets: tuple[int, ...]

    def _deflated(self, index: int) -> bytes:
        """The deflate data of band ``index``."""
        raise NotImplementedError

    def rows(self, start: int, stop: int) -> RGBArray:
        """Rows ``start .. stop-1`` as an HxWx3 array (inflates only the bands they lie in)."""
        start, stop = max(0, start), min(stop, self.height)
        first, last = start // self.band_rows, -(-stop // self.band_rows)
        offset = first * self.band_rows
        # The last band is inflated only as far as the rows asked for (deflate reads in order).
        bands = [self._band(index, stop - index * self.band_rows) for index in range(first, last)]
        block = bands[0] if len(bands) == 1 else np.concatenate(bands)
        return block[start - offset : stop - offset]

    def _band(self, index: int, wanted: int | None = None) -> RGBArray:
        """Band ``index``'s rows, or only its first ``wanted`` (the rest not inflated)."""
        rows = min(self.band_rows, self.height - index * self.band_rows)
        whole = wanted is None or wanted >= rows
        if wanted is not None and not whole:
            rows = wanted
        stride = 1 + 3 * self.width
        inflater = zlib.decompressobj(-zlib.MAX_WBITS)
        try:
            raw = inflater.decompress(self._deflated(index), rows * stride + int(whole))
        except (zlib.error, binascii.Error) as err:
            raise OpError(ErrorCode.INTERNAL, "a kept screen capture is corrupt") from err
        if len(raw) != rows * stride or (whole and inflater.unconsumed_tail):
            raise OpError(ErrorCode.INTERNAL, "a kept screen capture has a wrong size")
        lines = np.frombuffer(raw, dtype=np.uint8).reshape(rows, stride)
        if lines[:, 0].any():
            raise OpError(ErrorCode.INTERNAL, "a kept screen capture uses PNG filters")
        return lines[:, 1:].reshape(rows, self.width, 3)

    def pixels(self) -> RGBArray:
        """The whole capture as an HxWx3 array."""
        return self.rows(0, self.height)

    def region(self, rect: CropRect) -> RGBArray:
        """The pixels of ``rect`` (a copy)."""
        if not rect.fits((self.width, self.height)):
            raise InvalidArgs("rect", "is outside the screenshot")
        rows = self.rows(rect.y, rect.y + rect.height)
        return rows[:, rect.x : rect.x + rect.width].copy()


@dataclass(frozen=True)
class BandedPng(_Bands):
    """A PNG made of independently deflated row bands, and where each band starts."""

    data: bytes
    width: int
    height: int
    band_rows: int
    offsets: tuple[int, ...]

    @classmethod
    def from_pixels(cls, pixels: RGBArray, band_rows: int = BAND_ROWS) -> Self:
        """Encode an HxWx3 RGB array."""
        png = encode_png(pixels, "RGB", band_rows=band_rows)[0]
        return cls(png.data, png.width, png.height, png.band_rows, png.offsets)

    def to_wire(self, *, with_png: bool) -> dict[str, Any]:
        """The ``capture`` of a screenshot result; the PNG itself only when it is not the image."""
        wire: dict[str, Any] = {
            "encoding": CAPTURE_ENCODING,
            "width": self.width,
            "height": self.height,
            "band_rows": self.band_rows,
            "offsets": list(self.offsets),
        }
        if with_png:
            wire["png"] = base64.b64encode(self.data).decode("ascii")
        return wire

    def _deflated(self, index: int) -> bytes:
        return self.data[self.offsets[index] : self.offsets[index + 1]]


@dataclass(frozen=True)
class Base64BandedPng(_Bands):
    """A banded PNG as a relay sent it: base64 text, decoded one band at a time when read.

    The server keeps screenshots in this form: decoding a whole 1280x800 screenshot cost
    ~0.3 ms of every screenshot's round trip, and a guard crop needs two or three bands. The
    text is ~4/3 the size of the PNG, and accounted as such.
    """

    text: str
    width: int
    height: int
    band_rows: int
    offsets: tuple[int, ...]

    @classmethod
    def from_png(cls, png: BandedPng) -> Self:
        """The base64 form of ``png`` (tests and tools; relays send :meth:`from_wire` data)."""
        text = base64.b64encode(png.data).decode("ascii")
        return cls(text, png.width, png.height, png.band_rows, png.offsets)

    @classmethod
    def from_pixels(cls, pixels: RGBArray, band_rows: int = BAND_ROWS) -> Self:
        """Encode an HxWx3 RGB array (tests and tools)."""
        return cls.from_png(BandedPng.from_pixels(pixels, band_rows))

    @classmethod
    def from_wire(cls, value: Any, image: Any = None) -> Self:
        """Check a relay's ``capture`` structurally; its PNG is ``capture.png`` or, when the
        screenshot is itself that PNG, the screenshot's base64 ``image``.

        Band contents (their base64 and deflate data) are checked when they are read
        (:meth:`rows`): a band that does not decode to exactly its rows is an error there,
        never wrong pixels.
        """
        if not isinstance(value, dict) or value.get("encoding") != CAPTURE_ENCODING:
            raise _bad_capture("has no usable raw capture")
        width, height = _dimension(value.get("width")), _dimension(value.get("height"))
        band_rows = _dimension(value.get("band_rows"))
        if width * height > MAX_CAPTURE_PIXELS:
            raise _bad_capture("is larger than any screen")
        text = value.get("png", image)
        size = _base64_size(text)
        try:
            signature = _decode(text, 0, len(PNG_SIGNATURE))
        except binascii.Error as err:
            raise _bad_capture("is not base64") from err
        if signature != PNG_SIGNATURE:
            raise _bad_capture("is not a PNG")
        offsets = value.get("offsets")
        bands = -(-height // band_rows)
        if (
            not isinstance(offsets, list)
            or len(offsets) != bands + 1
            or not all(type(o) is int for o in offsets)
            or offsets[0] != FIRST_BAND_OFFSET
            or offsets[-1] > size
            or any(a >= b for a, b in itertools.pairwise(offsets))
        ):
            raise _bad_capture(f"does not locate its {bands} bands")
        return cls(text, width, height, band_rows, tuple(offsets))

    def _deflated(self, index: int) -> bytes:
        return _decode(self.text, self.offsets[index], self.offsets[index + 1])


def bgra_to_rgb(bgra: npt.NDArray[np.uint8]) -> RGBArray:
    """An HxWx4 BGRA capture (what X and mss give) as a contiguous HxWx3 RGB array."""
    rgb = np.empty((*bgra.shape[:2], 3), dtype=np.uint8)
    for channel in range(3):  # one channel at a time: ~4x faster than a 3-wide strided copy
        rgb[:, :, channel] = bgra[:, :, 2 - channel]
    return rgb


def encode_png(
    pixels: npt.NDArray[np.uint8],
    order: PixelOrder = "RGB",
    *,
    map_bands: BandMap = map,
    level: int = ZLIB_LEVEL,
    band_rows: int = BAND_ROWS,
) -> tuple[BandedPng, RGBArray]:
    """Encode an HxWx4 BGRA (as captured) or HxWx3 RGB array.

    Returns the PNG and the RGB pixels as a view of its scanlines (the guard, previews and
    other formats use them; no second conversion).
    """
    height, width = int(pixels.shape[0]), int(pixels.shape[1])
    expected = 4 if order == "BGRA" else 3
    if pixels.ndim != 3 or pixels.shape[2] != expected or pixels.dtype != np.uint8:
        raise ValueError(f"expected an HxWx{expected} uint8 array")
    if not 0 < width * height <= MAX_CAPTURE_PIXELS:
        raise ValueError("image size out of range")
    source = pixels[:, :, 2::-1] if order == "BGRA" else pixels
    scanlines = np.empty((height, 1 + 3 * width), dtype=np.uint8)
    starts = range(0, height, band_rows)
    last = starts[-1]

    def band(top: int) -> Band:
        lines = scanlines[top : top + band_rows]
        lines[:, 0] = 0  # filter type None
        target = lines[:, 1:].reshape(len(lines), width, 3)
        for channel in range(3):  # one channel at a time: ~4x faster than a 3-wide strided copy
            target[:, :, channel] = source[top : top + band_rows, :, channel]
        deflater = zlib.compressobj(level, zlib.DEFLATED, -zlib.MAX_WBITS)
        flush = zlib.Z_FINISH if top == last else zlib.Z_FULL_FLUSH
        raw = lines.data  # whole rows of a C-contiguous array: one contiguous buffer
        data = deflater.compress(raw) + deflater.flush(flush)
        return data, zlib.adler32(raw), lines.nbytes

    bands = list(map_bands(band, starts))
    adler = 1
    offsets = [FIRST_BAND_OFFSET]
    for data, band_adler, size in bands:
        adler = adler32_combine(adler, band_adler, size)
        offsets.append(offsets[-1] + len(data))
    idat = b"".join([_ZLIB_HEADER, *(data for data, _, _ in bands), struct.pack("!I", adler)])
    header = struct.pack("!IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB, no interlace
    png = b"".join(
        [PNG_SIGNATURE, _chunk(b"IHDR", header), _chunk(b"IDAT", idat), _chunk(b"IEND", b"")]
    )
    rgb = scanlines[:, 1:].reshape(height, width, 3)
    return BandedPng(png, width, height, band_rows, tuple(offsets)), rgb


def _dimension(value: Any) -> int:
    if type(value) is not int or not 0 < value <= 16384:
        raise _bad_capture("has an invalid size")
    return value


def _base64_size(text: Any) -> int:
    """How many bytes base64 ``text`` holds (its characters are checked when decoded)."""
    if not isinstance(text, str):
        raise _bad_capture("has no PNG")
    if not text.isascii() or len(text) % 4 or not text:
        raise _bad_capture("is not base64")
    return len(text) // 4 * 3 - (text[-2:].count("="))


def _decode(text: str, start: int, stop: int) -> bytes:
    """Bytes ``start .. stop-1`` of base64 ``text``, decoding only the groups they lie in;
    raises ``binascii.Error`` on characters outside the base64 alphabet."""
    first = start // 3
    raw = binascii.a2b_base64(text[first * 4 : -(-stop // 3) * 4], strict_mode=True)
    return raw[start - first * 3 : stop - first * 3]


def _bad_capture(problem: str) -> OpError:
    return OpError(ErrorCode.PROTOCOL_ERROR, f"the relay's screenshot capture {problem}")
