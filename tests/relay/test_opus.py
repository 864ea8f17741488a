"""The Opus encoder's C signatures: real encoders in child processes, also above 4 GiB."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.processes import scaled

pytestmark = pytest.mark.unit

REPO_ROOT = Path(__file__).resolve().parents[2]
# Runs in a child: a crash (a pointer cut to 32 bits) must fail this test, not the test run.
CHILD = r"""
import ctypes, json, math, mmap, struct, sys
import numpy as np
import opuslib
from relay.audio import FRAME_SAMPLES, OpusEncoder

mode = sys.argv[1]
t = np.arange(FRAME_SAMPLES * 5) / 48000
sine = (np.sin(2 * np.pi * 440 * t) * 12000).astype("<i2")
pcm = np.repeat(sine, 2).tobytes()
frames = [pcm[i : i + FRAME_SAMPLES * 4] for i in range(0, len(pcm), FRAME_SAMPLES * 4)]

def use(encoder):
    encoder.set_bitrate(96000)
    packets = [encoder.encode(frame) for frame in frames]
    decoder = opuslib.Decoder(48000, 2)
    decoded = b"".join(decoder.decode(p, FRAME_SAMPLES) for p in packets)
    return packets, np.abs(np.frombuffer(decoded, "<i2")).max()

if mode == "fixed":
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    hint, size = 0x5A5A_0000_0000, OpusEncoder.size() + 4096
    MAP_FIXED_NOREPLACE = 0x100000
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | MAP_FIXED_NOREPLACE
    address = libc.mmap(hint, size, mmap.PROT_READ | mmap.PROT_WRITE, flags, -1, 0)
    assert address == hint, hex(address or 0)
    encoder = OpusEncoder.init_at(address)
else:
    if mode == "mmap":  # from here on, every malloc is an mmap: the high mapping area
        M_MMAP_THRESHOLD = -3
        assert ctypes.CDLL(None).mallopt(M_MMAP_THRESHOLD, 0) == 1
    encoder = OpusEncoder.create()
    address = encoder.address
packets, peak = use(encoder)
encoder.close()
print(json.dumps({"address": address, "packets": [len(p) for p in packets], "peak": int(peak),
                  "as_c_int": ctypes.c_int(address).value}))
"""


def run_child(mode: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, "-c", CHILD, mode],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), **(env or {})},
        capture_output=True,
        text=True,
        timeout=scaled(60),
        check=False,
    )
    assert result.returncode == 0, result.stderr
    decoded: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return decoded


def check_encoded(result: dict[str, Any]) -> None:
    assert len(result["packets"]) == 5 and all(n > 0 for n in result["packets"])
    assert result["peak"] > 3000, "the decoded packets carry the tone"


def test_encoder_with_the_normal_allocator() -> None:
    check_encoded(run_child("create"))


def test_encoder_allocated_by_malloc_through_mmap_above_4_gib() -> None:
    # Every allocation through mmap (from just before the encoder's: the whole interpreter's
    # start-up through mmap took seconds): the encoder lands in the high mapping area.
    result = run_child("mmap")
    assert result["address"] > 2**32, hex(result["address"])
    assert result["as_c_int"] != result["address"], "an int-typed pointer would be cut"
    check_encoded(result)


def test_encoder_placed_at_a_fixed_high_address() -> None:
    result = run_child("fixed")
    assert result["address"] == 0x5A5A_0000_0000 > 2**32
    assert result["as_c_int"] != result["address"]
    check_encoded(result)
