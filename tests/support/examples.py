"""How many examples a property test draws: its own number in the whole suite, a fifth of it
in the inner loop (``scripts/test --fast`` sets ``RELAYDESK_FUZZ_SCALE=0.2``)."""

from __future__ import annotations

import os

FUZZ_SCALE = float(os.environ.get("RELAYDESK_FUZZ_SCALE", "1") or "1")


def examples(count: int) -> int:
    """``count`` scaled for this run, never fewer than 10."""
    return max(10, round(count * FUZZ_SCALE))
