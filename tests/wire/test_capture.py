"""The banded PNG: a valid PNG for any decoder, and bands the server can inflate one by one."""

from __future__ import annotations

import io
import struct
import zlib
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

from wire.capture import (
    FIRST_BAND_OFFSET,
    PNG_SIGNATURE,
    BandedPng,
    adler32_combine,
    encode_png,
)
from wire.errors import OpError
from wire.guard import CropRect

pytestmark = pytest.mark.unit


def _picture(width: int, height: int, seed: int = 0) -> np.ndarray:
    """Flat panels, bars and noise: what desktops look like, with exact pixels to check."""
    rng = np.random.default_rng(seed)
    image = np.full((height, width, 3), 0xF0, np.uint8)
    image[: max(1, height // 10)] = (0x2B, 0x57, 0x9A)
    image[height // 2 :, width // 2 :] = rng.integers(0, 256, (height - height // 2, 1, 3))
    image[height // 3 : height // 3 + 5, : width // 3] = rng.integers(0, 256, (1, 1, 3))
    image[-3:, -7:] = rng.integers(0, 256, image[-3:, -7:].shape)
    return image


def _chunks(png: bytes) -> list[tuple[bytes, bytes]]:
    """(tag, body) of every chunk, checking each CRC on the way."""
    assert png.startswith(PNG_SIGNATURE)
    position, chunks = len(PNG_SIGNATURE), []
    while position < len(png):
        (length,) = struct.unpack_from("!I", png, position)
        tag = png[position + 4 : position + 8]
        body = png[position + 8 : position + 8 + length]
        (crc,) = struct.unpack_from("!I", png, position + 8 + length)
        assert crc == zlib.crc32(tag + body), f"bad CRC on {tag!r}"
        chunks.append((tag, body))
        position += 12 + length
    return chunks


@pytest.mark.parametrize(("width", "height"), [(1, 1), (7, 3), (100, 64), (101, 77), (1280, 65)])
def test_any_png_decoder_reads_the_exact_pixels(width: int, height: int) -> None:
    pixels = _picture(width, height)
    png, rgb = encode_png(pixels, band_rows=16)
    decoded = np.asarray(Image.open(io.BytesIO(png.data)).convert("RGB"))
    assert np.array_equal(decoded, pixels)
    assert np.array_equal(rgb, pixels)
    tags = [tag for tag, _ in _chunks(png.data)]
    assert tags == [b"IHDR", b"IDAT", b"IEND"]


def test_the_zlib_stream_and_its_checksum_are_whole() -> None:
    pixels = _picture(90, 70, seed=3)
    png, _ = encode_png(pixels, band_rows=8)
    idat = dict(_chunks(png.data))[b"IDAT"]
    raw = zlib.decompress(idat)  # verifies the combined Adler-32
    lines = np.frombuffer(raw, np.uint8).reshape(70, 1 + 90 * 3)
    assert not lines[:, 0].any()  # filter type None on every row
    assert np.array_equal(lines[:, 1:].reshape(70, 90, 3), pixels)


def test_bgra_as_captured_encodes_like_rgb() -> None:
    pixels = _picture(33, 21, seed=5)
    bgra = np.concatenate([pixels[:, :, ::-1], np.full((21, 33, 1), 0x55, np.uint8)], axis=2)
    from_bgra, rgb = encode_png(bgra, "BGRA", band_rows=4)
    assert from_bgra.data == encode_png(pixels, band_rows=4)[0].data
    assert np.array_equal(rgb, pixels)


def test_bands_compressed_in_parallel_give_the_same_file() -> None:
    pixels = _picture(640, 200, seed=9)
    serial, _ = encode_png(pixels)
    with ThreadPoolExecutor(4) as pool:
        parallel, _ = encode_png(pixels, map_bands=pool.map)
    assert parallel == serial


def test_each_band_inflates_on_its_own() -> None:
    pixels = _picture(50, 45, seed=2)
    png, _ = encode_png(pixels, band_rows=10)
    assert png.offsets[0] == FIRST_BAND_OFFSET
    assert len(png.offsets) == 5 + 1  # 4 full bands and a short one, plus the end
    for top in range(0, 45, 10):
        assert np.array_equal(png.rows(top, top + 10), pixels[top : top + 10])
    assert np.array_equal(png.rows(9, 11), pixels[9:11])  # across a band boundary
    rect = CropRect(3, 8, 20, 30)
    assert np.array_equal(png.region(rect), pixels[8:38, 3:23])


def test_a_band_with_a_png_filter_is_refused() -> None:
    pixels = _picture(8, 4)
    png, _ = encode_png(pixels, band_rows=4)
    lines = bytearray(zlib.decompress(dict(_chunks(png.data))[b"IDAT"]))
    lines[0] = 1  # "Sub": valid PNG, but not what the guard can crop without unfiltering
    deflater = zlib.compressobj(1, zlib.DEFLATED, -zlib.MAX_WBITS)
    band = deflater.compress(bytes(lines)) + deflater.flush()
    data = png.data[:FIRST_BAND_OFFSET] + band
    filtered = BandedPng(data, 8, 4, 4, (FIRST_BAND_OFFSET, FIRST_BAND_OFFSET + len(band)))
    with pytest.raises(OpError, match="filters"):
        filtered.pixels()


def test_wrong_arrays_are_refused() -> None:
    with pytest.raises(ValueError, match="HxWx3"):
        encode_png(np.zeros((4, 4, 4), np.uint8))
    with pytest.raises(ValueError, match="HxWx4"):
        encode_png(np.zeros((4, 4, 3), np.uint8), "BGRA")
    with pytest.raises(ValueError, match="uint8"):
        encode_png(np.zeros((4, 4, 3), np.float32))


@given(st.binary(max_size=3000), st.binary(max_size=3000))
def test_adler32_combine_matches_zlib(first: bytes, second: bytes) -> None:
    combined = adler32_combine(zlib.adler32(first), zlib.adler32(second), len(second))
    assert combined == zlib.adler32(first + second)


def test_adler32_combine_with_long_runs() -> None:
    first, second = b"\xff" * 200_000, b"\xfe" * 70_000  # sums past the modulus
    combined = adler32_combine(zlib.adler32(first), zlib.adler32(second), len(second))
    assert combined == zlib.adler32(first + second)
