"""Settings of the desktop tools (``RELAYDESK_CUA_SHELL``, ``RELAYDESK_DENY_APPS``;
docs/configuration.md)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from relay.policy import DeniedApps
from wire.errors import RelaydeskError

SHELL_ENV: Final = "RELAYDESK_CUA_SHELL"
TRUE_WORDS: Final = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS: Final = frozenset({"", "0", "false", "no", "off"})


class DesktopToolsConfigError(RelaydeskError):
    """A desktop tools setting that cannot be used as given."""


@dataclass(frozen=True)
class DesktopToolSettings:
    """Whether agents may run shell and file commands in this relay's desktops (off unless
    the operator opts in: they reach everything the desktop's user may)."""

    cua_shell: bool = False
    # Apps whose windows the window and clipboard tools leave alone (relay/policy.py).
    denied: DeniedApps = field(default_factory=DeniedApps)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> DesktopToolSettings:
        env = os.environ if environ is None else environ
        raw = env.get(SHELL_ENV, "").strip().lower()
        if raw not in TRUE_WORDS | FALSE_WORDS:
            raise DesktopToolsConfigError(f"{SHELL_ENV}={raw!r}: give 1 or 0")
        return cls(cua_shell=raw in TRUE_WORDS, denied=DeniedApps.from_env(env))
