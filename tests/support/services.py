"""``Services`` for tests that build a bare app around a few routes."""

from __future__ import annotations

import dataclasses
from typing import Any

from server.services import Services


def bare_services(**parts: Any) -> Services:
    """The parts given; ``None`` for every part the routes under test never touch."""
    unused = dict.fromkeys(field.name for field in dataclasses.fields(Services))
    return Services(**{**unused, **parts})
