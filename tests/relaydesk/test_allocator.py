"""The allocator settings apply on this (glibc) system and change nothing else."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit


def test_allocator_settings_apply_in_a_fresh_process() -> None:
    # A child process, so the test run itself keeps glibc's defaults.
    code = "from relaydesk.allocator import tune_allocator; print(tune_allocator())"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "True"
