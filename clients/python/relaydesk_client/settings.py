"""The environment variables that name a server and an API token, one name each.

``RELAYDESK_SERVER_URL`` and ``RELAYDESK_API_TOKEN`` are the names; ``RELAYDESK_URL`` and
``RELAYDESK_TOKEN`` (the client's former names) are still read when the new name is unset,
with a deprecation warning.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import Final

URL_ENV: Final = "RELAYDESK_SERVER_URL"
TOKEN_ENV: Final = "RELAYDESK_API_TOKEN"  # noqa: S105 - a variable's name
CONVERSATION_ENV: Final = "RELAYDESK_CONVERSATION_ID"

# Former name → the name that replaced it.
DEPRECATED_ENV: Final = {"RELAYDESK_URL": URL_ENV, "RELAYDESK_TOKEN": TOKEN_ENV}


def deprecation_notice(old: str) -> str:
    """What a program says when it reads a setting under its former name."""
    return f"{old} is deprecated and will stop working: set {DEPRECATED_ENV[old]} instead"


def _warn(message: str) -> None:
    # FutureWarning, not DeprecationWarning: it is meant for the person who set the variable,
    # and Python shows it by default.
    warnings.warn(message, FutureWarning, stacklevel=4)


def env_setting(name: str, *, warn: Callable[[str], None] = _warn) -> str:
    """The variable ``name`` (stripped; "" when unset), else its former name's value, with
    ``warn`` told the deprecation."""
    value = os.environ.get(name, "").strip()
    if value:
        return value
    for old, new in DEPRECATED_ENV.items():
        if new == name and (value := os.environ.get(old, "").strip()):
            warn(deprecation_notice(old))
            return value
    return ""
