"""Fixtures shared by the integration tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.stack import Seed, seed_database


@pytest.fixture
async def seed(tmp_path: Path) -> Seed:
    """A fresh database: a user, a conversation, a relay."""
    return await seed_database(tmp_path / "data")
