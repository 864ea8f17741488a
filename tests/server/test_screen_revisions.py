"""The screen revision store: signed revisions, TTL, the memory bound, LRU eviction."""

from __future__ import annotations

import base64
import json
import zlib
from typing import Any

import numpy as np
import pytest

from server.screen.revisions import (
    ENTRY_OVERHEAD_BYTES,
    Binding,
    Capture,
    RevisionStore,
    verify,
)
from wire.capture import BandedPng
from wire.errors import ErrorCode, InvalidArgs, OpError
from wire.guard import CropRect

pytestmark = pytest.mark.unit

KEY = "test-secret"
TARGET = Binding("relay-1", "session-a", ":5")


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def _random(width: int, height: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def _capture(width: int = 64, height: int = 48, seed: int = 0) -> Capture:
    return Capture.from_pixels(_random(width, height, seed), band_rows=16)


def _code(info: pytest.ExceptionInfo[OpError]) -> ErrorCode:
    return info.value.code


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(clock: Clock) -> RevisionStore:
    return RevisionStore(KEY, ttl_s=300, memory_bytes=10 * 1024 * 1024, clock=clock)


def test_a_kept_capture_comes_back_for_its_own_target(store: RevisionStore) -> None:
    capture = _capture()
    token = store.keep(TARGET, capture)
    kept = store.lookup(token, "relay-1", "session-a")
    assert kept.capture is capture
    assert kept.revision.binding == TARGET
    # the default desktop (no session named) is accepted here and checked by the relay
    assert store.lookup(token, "relay-1", None).capture is capture


def test_revisions_are_opaque_and_unique(store: RevisionStore) -> None:
    first, second = store.keep(TARGET, _capture()), store.keep(TARGET, _capture())
    assert first != second
    assert first.startswith("sr1.") and first.count(".") == 2


@pytest.mark.parametrize(
    ("relay", "session"), [("relay-2", "session-a"), ("relay-1", "session-b"), ("relay-2", None)]
)
def test_another_target_is_a_mismatch(
    store: RevisionStore, relay: str, session: str | None
) -> None:
    token = store.keep(TARGET, _capture())
    with pytest.raises(OpError) as info:
        store.lookup(token, relay, session)
    assert _code(info) is ErrorCode.REVISION_MISMATCH


def _reforge(token: str, **changes: str) -> str:
    """The token with its payload edited and the old signature kept."""
    prefix, body, signature = token.split(".")
    payload = json.loads(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)))
    payload.update(changes)
    raw = json.dumps(payload, separators=(",", ":")).encode()
    return f"{prefix}.{base64.urlsafe_b64encode(raw).rstrip(b'=').decode()}.{signature}"


def test_a_revision_moved_to_another_target_is_refused(store: RevisionStore) -> None:
    token = store.keep(TARGET, _capture())
    for changes in ({"s": "session-b"}, {"r": "relay-2"}, {"d": ":6"}):
        moved = _reforge(token, **changes)
        with pytest.raises(OpError) as info:
            store.lookup(moved, changes.get("r", "relay-1"), changes.get("s", "session-a"))
        assert _code(info) is ErrorCode.REVISION_MISMATCH
        assert info.value.details["reason"] == "not_issued_here"


def test_a_revision_signed_with_another_key_is_forged(store: RevisionStore, clock: Clock) -> None:
    other = RevisionStore("another-key", clock=clock)
    token = other.keep(TARGET, _capture())
    with pytest.raises(OpError) as info:
        store.lookup(token, "relay-1", "session-a")
    assert _code(info) is ErrorCode.REVISION_MISMATCH


@pytest.mark.parametrize(
    "token", ["", "sr1", "sr1..", "sr1.abc", "xx1.abc.def", "sr1.!!!.def", "sr1.a.b.c", 42, None]
)
def test_malformed_revisions_are_invalid_args(store: RevisionStore, token: object) -> None:
    with pytest.raises(InvalidArgs) as info:
        store.lookup(token, "relay-1", "session-a")
    assert info.value.details["field"] == "expected_screen_revision"


def test_a_signed_but_unknown_id_is_expired(store: RevisionStore) -> None:
    token = store.keep(TARGET, _capture())
    unknown = RevisionStore(KEY).keep(TARGET, _capture())  # same key, never kept here
    with pytest.raises(OpError) as info:
        store.lookup(unknown, "relay-1", "session-a")
    assert _code(info) is ErrorCode.REVISION_EXPIRED
    assert store.lookup(token, "relay-1", "session-a")


def test_ttl_expires_captures(store: RevisionStore, clock: Clock) -> None:
    token = store.keep(TARGET, _capture())
    clock.now += 299.0
    store.lookup(token, "relay-1", "session-a")
    clock.now += 1.0
    with pytest.raises(OpError) as info:
        store.lookup(token, "relay-1", "session-a")
    assert _code(info) is ErrorCode.REVISION_EXPIRED
    assert info.value.details["reason"] == "ttl"
    assert len(store) == 0
    assert store.stats().memory_bytes == 0
    assert store.stats().expired == 1


def test_memory_bound_evicts_least_recently_used(clock: Clock) -> None:
    one = _capture(seed=1)
    bound = 3 * one.size_bytes + one.size_bytes // 2
    store = RevisionStore(KEY, memory_bytes=bound, clock=clock)
    tokens = [store.keep(TARGET, _capture(seed=n)) for n in range(3)]
    store.lookup(tokens[0], "relay-1", "session-a")  # now the most recently used
    fourth = store.keep(TARGET, _capture(seed=3))
    assert len(store) == 3
    assert store.stats().memory_bytes <= bound
    assert store.stats().evicted_for_memory == 1
    with pytest.raises(OpError) as info:
        store.lookup(tokens[1], "relay-1", "session-a")
    assert _code(info) is ErrorCode.REVISION_EXPIRED
    assert info.value.details["reason"] == "evicted"
    for token in (tokens[0], tokens[2], fourth):
        store.lookup(token, "relay-1", "session-a")


def test_memory_stays_bounded_under_many_captures(clock: Clock) -> None:
    bound = 200_000
    store = RevisionStore(KEY, memory_bytes=bound, clock=clock)
    for n in range(300):
        store.keep(TARGET, _capture(32, 32, seed=n))
        assert store.stats().memory_bytes <= bound
    assert 0 < len(store) < 300
    assert store.stats().memory_bytes == sum(
        ENTRY_OVERHEAD_BYTES + len(_capture(32, 32, seed=n).text)
        for n in range(300 - len(store), 300)
    )


def test_a_capture_larger_than_the_bound_is_not_kept(clock: Clock) -> None:
    store = RevisionStore(KEY, memory_bytes=100, clock=clock)
    token = store.keep(TARGET, _capture())
    assert len(store) == 0
    with pytest.raises(OpError) as info:
        store.lookup(token, "relay-1", "session-a")
    assert _code(info) is ErrorCode.REVISION_EXPIRED


def test_latest_names_the_newest_kept_revision(store: RevisionStore, clock: Clock) -> None:
    assert store.latest(TARGET) is None
    store.keep(TARGET, _capture())
    newest = store.keep(TARGET, _capture())
    store.keep(Binding("relay-1", "session-b", ":6"), _capture())
    assert store.latest(TARGET) == newest
    clock.now += 301
    store.keep(Binding("relay-1", "session-b", ":6"), _capture())  # sweeps the old ones
    assert store.latest(TARGET) is None


def test_verify_reads_the_binding_back() -> None:
    store = RevisionStore(KEY)
    token = store.keep(TARGET, _capture())
    revision = verify(KEY, token)
    assert revision.binding == TARGET


@pytest.mark.parametrize(
    ("x", "y", "width", "height"),
    [(10, 20, 30, 40), (0, 0, 100, 77), (5, 15, 3, 2), (0, 16, 100, 16), (99, 76, 1, 1)],
)
def test_regions_and_rows_decode_exactly(x: int, y: int, width: int, height: int) -> None:
    full = _random(100, 77, 7)  # the last band is short
    capture = Capture.from_pixels(full, band_rows=16)
    assert len(capture.offsets) == 5 + 1
    assert np.array_equal(capture.pixels(), full)
    rect = CropRect(x, y, width, height)
    assert np.array_equal(capture.region(rect), full[y : y + height, x : x + width])
    assert np.array_equal(capture.rows(3, 40), full[3:40])


def test_a_region_outside_the_capture_is_refused() -> None:
    with pytest.raises(InvalidArgs):
        _capture(100, 80).region(CropRect(90, 70, 20, 20))


def _text(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_a_corrupt_or_short_capture_is_an_error() -> None:
    good = BandedPng.from_pixels(_random(10, 10, 0), band_rows=16)
    offsets = good.offsets
    noise = b"\xff" * (offsets[-1] - offsets[0])
    garbage = good.data[: offsets[0]] + noise + good.data[offsets[-1] :]
    with pytest.raises(OpError):
        Capture(_text(garbage), 10, 10, good.band_rows, offsets).pixels()
    # A band that inflates to fewer rows than it claims.
    short = zlib.compressobj(1, zlib.DEFLATED, -zlib.MAX_WBITS)
    band = short.compress(b"\0" * 30) + short.flush()
    data = good.data[: offsets[0]] + band
    with pytest.raises(OpError):
        Capture(_text(data), 10, 10, 16, (offsets[0], offsets[0] + len(band))).pixels()


def test_base64_garbage_inside_a_band_is_an_error_when_the_band_is_read() -> None:
    png = BandedPng.from_pixels(_random(10, 40, 0), band_rows=16)
    text = _text(png.data)
    at = png.offsets[1] // 3 * 4 + 4  # inside the second band's base64
    capture = Capture.from_wire(png.to_wire(with_png=False), text[:at] + "*" + text[at + 1 :])
    assert np.array_equal(capture.rows(0, 16), png.rows(0, 16))  # the first band is intact
    with pytest.raises(OpError) as info:
        capture.rows(16, 32)
    assert _code(info) is ErrorCode.INTERNAL


@pytest.mark.parametrize("start", range(0, 7))
@pytest.mark.parametrize("length", range(1, 8))
def test_bands_decode_from_any_offset_of_the_base64_text(start: int, length: int) -> None:
    # Bands start anywhere in the PNG, not on 3-byte base64 groups.
    data = bytes(range(40))
    capture = Capture(_text(data), 1, 1, 1, (start, start + length))
    assert capture._deflated(0) == data[start : start + length]


def _wire(good: BandedPng, **changes: Any) -> dict[str, Any]:
    return {**good.to_wire(with_png=True), **changes}


_GOOD = BandedPng.from_pixels(np.zeros((3, 4, 3), np.uint8), band_rows=1)


@pytest.mark.parametrize(
    "wire",
    [
        None,
        _wire(_GOOD, encoding="zlib-rgb24-bands"),
        _wire(_GOOD, width=0),
        _wire(_GOOD, width=True),
        _wire(_GOOD, png="***"),
        _wire(_GOOD, png="****"),
        _wire(_GOOD, png=""),
        _wire(_GOOD, png="grüße=="),
        _wire(_GOOD, png=12),
        _wire(_GOOD, png=base64.b64encode(b"GIF89a").decode()),
        _wire(_GOOD, height=5),  # more bands than offsets
        _wire(_GOOD, offsets=[*_GOOD.offsets[:-1], len(_GOOD.data) + 1]),  # past the end
        _wire(_GOOD, offsets=[_GOOD.offsets[0], _GOOD.offsets[0], *_GOOD.offsets[2:]]),
        _wire(_GOOD, offsets=[0, *_GOOD.offsets[1:]]),  # not where the pixel data starts
        _wire(_GOOD, offsets=[float(o) for o in _GOOD.offsets]),
        _wire(_GOOD, width=99999, height=99999, band_rows=99999),
    ],
)
def test_bad_relay_captures_are_protocol_errors(wire: object) -> None:
    with pytest.raises(OpError) as info:
        Capture.from_wire(wire)
    assert _code(info) is ErrorCode.PROTOCOL_ERROR


def test_capture_from_wire_round_trips() -> None:
    png = BandedPng.from_pixels(_random(64, 48, 0), band_rows=16)
    capture = Capture.from_wire(png.to_wire(with_png=True))
    assert capture == Capture.from_png(png)
    assert np.array_equal(capture.pixels(), png.pixels())
    assert capture.size_bytes > len(png.data)  # the text is what is kept, and accounted
    # A PNG screenshot is its own capture: the PNG comes as the image instead.
    image = base64.b64encode(png.data).decode()
    assert Capture.from_wire(png.to_wire(with_png=False), image) == capture
