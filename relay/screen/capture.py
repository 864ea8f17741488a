"""Screen capture with mss (one instance per display) and image encoding.

A :class:`ScreenCapture` belongs to one display and is used from that display's worker
thread only. Captures are HxWx3 RGB numpy arrays, the same layout ``wire.guard`` compares.
Encoder settings were measured with ``benchmarks/bench_screen_local.py``; see
``docs/screen-tool.md``.
"""

from __future__ import annotations

import base64
import io
import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import mss
import numpy as np
import numpy.typing as npt
from PIL import Image

from wire.capture import BandedPng, bgra_to_rgb, encode_png
from wire.errors import ErrorCode, OpError
from wire.guard import CropRect
from wire.screen_args import ImageFormat

logger = logging.getLogger(__name__)

RGBArray = npt.NDArray[np.uint8]

# PNGs are ``wire.capture``'s banded PNGs: bands deflate in parallel on these threads (zlib
# and numpy release the GIL), shared by every display's worker.
ENCODER_THREADS = max(2, os.cpu_count() or 2)
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()
DEFAULT_JPEG_QUALITY = 80
DEFAULT_WEBP_QUALITY = 80
# WebP "method" trades speed for size (0 fastest .. 6 smallest); 4 is Pillow's default.
WEBP_METHOD = 2


@dataclass(frozen=True)
class EncodedImage:
    """Encoded bytes plus the size they show."""

    format: ImageFormat
    width: int
    height: int
    data: bytes

    def to_dict(self) -> dict[str, Any]:
        return {
            "width": self.width,
            "height": self.height,
            "format": self.format,
            "image": base64.b64encode(self.data).decode("ascii"),
        }


def _encoder() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(ENCODER_THREADS, thread_name_prefix="screen-encode")
        return _pool


def _open_mss(display: str) -> Any:
    # mss >= 10.2 names the class MSS; older releases only have the mss() factory.
    factory = getattr(mss, "MSS", None) or mss.mss
    # No display name: the screen of this process, on a platform where screens have no names.
    return factory(display=display) if display else factory()


class ScreenCapture:
    """Grabs pixels from one X display through a private mss instance."""

    def __init__(self, display: str) -> None:
        try:
            self._mss = _open_mss(display)
        except mss.ScreenShotError as err:
            raise OpError(ErrorCode.UNAVAILABLE, f"cannot capture display {display}") from err
        self._display = display

    def grab(
        self, region: CropRect | None = None, screen_size: tuple[int, int] | None = None
    ) -> RGBArray:
        """Full screen (``screen_size`` or mss's view of it) or a region, as RGB."""
        return bgra_to_rgb(self.grab_bgra(region, screen_size))

    def grab_bgra(
        self, region: CropRect | None = None, screen_size: tuple[int, int] | None = None
    ) -> npt.NDArray[np.uint8]:
        """Like :meth:`grab`, as captured: HxWx4 BGRA (encoders convert while they work)."""
        if region is None:
            if screen_size is None:
                monitor = dict(self._mss.monitors[0])
            else:
                monitor = {"left": 0, "top": 0, "width": screen_size[0], "height": screen_size[1]}
        else:
            monitor = {
                "left": region.x,
                "top": region.y,
                "width": region.width,
                "height": region.height,
            }
        try:
            shot = self._mss.grab(monitor)
        except (mss.ScreenShotError, AssertionError) as err:
            # mss asserts where the X server's reply did not come (its connection lost: the
            # display's server ended) rather than raising its own error.
            raise OpError(ErrorCode.UNAVAILABLE, f"capture failed on {self._display}") from err
        return np.asarray(shot)

    def close(self) -> None:
        """Close the connection; one the display's server already ended is closed too."""
        try:
            self._mss.close()
        except mss.ScreenShotError as err:
            logger.debug("closing the capture of %s: %s", self._display, err)


def encode_screenshot(bgra: npt.NDArray[np.uint8]) -> tuple[BandedPng, RGBArray]:
    """A full-screen capture as the banded PNG (bands deflated in parallel) and its RGB pixels."""
    return encode_png(bgra, "BGRA", map_bands=_encoder().map)


def encode(rgb: RGBArray, fmt: ImageFormat = "png", quality: int | None = None) -> EncodedImage:
    """Encode an RGB array as PNG (banded, ``wire.capture``), JPEG or WebP."""
    height, width = rgb.shape[:2]
    if fmt == "png":
        png, _ = encode_png(rgb, "RGB", map_bands=_encoder().map)
        return EncodedImage(fmt, width, height, png.data)
    image = Image.fromarray(np.ascontiguousarray(rgb), "RGB")
    buffer = io.BytesIO()
    if fmt == "jpeg":
        image.save(buffer, "JPEG", quality=quality or DEFAULT_JPEG_QUALITY)
    else:
        image.save(buffer, "WEBP", quality=quality or DEFAULT_WEBP_QUALITY, method=WEBP_METHOD)
    return EncodedImage(fmt, width, height, buffer.getvalue())


def preview(rgb: RGBArray, max_width: int) -> RGBArray:
    """A downscaled copy no wider than ``max_width`` (aspect kept); coordinates stay full-size."""
    height, width = rgb.shape[:2]
    if width <= max_width:
        return rgb
    new_height = max(1, round(height * max_width / width))
    image = Image.fromarray(np.ascontiguousarray(rgb), "RGB")
    small = image.resize((max_width, new_height), Image.Resampling.BILINEAR)
    return np.asarray(small, dtype=np.uint8)


def magnify(rgb: RGBArray, size: tuple[int, int]) -> RGBArray:
    """``rgb`` enlarged to ``size`` (width, height): by a whole factor, each pixel becomes a
    block of that many pixels (exact); otherwise bicubic."""
    height, width = rgb.shape[:2]
    if (width, height) == size:
        return rgb
    factor, rest = divmod(size[0], width)
    if rest == 0 and size[1] == height * factor:
        return np.repeat(np.repeat(rgb, factor, axis=0), factor, axis=1)
    image = Image.fromarray(np.ascontiguousarray(rgb), "RGB")
    return np.asarray(image.resize(size, Image.Resampling.BICUBIC), dtype=np.uint8)
