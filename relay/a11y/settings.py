"""Accessibility settings of a relay (``RELAYDESK_A11Y_*``; docs/accessibility.md)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from relay.policy import DeniedApps, names_of
from wire.errors import RelaydeskError

DEFAULT_SNAPSHOT_TTL_S: Final = 120.0
DEFAULT_CALL_TIMEOUT_MS: Final = 250
TRUE_WORDS: Final = frozenset({"1", "true", "yes", "on"})
FALSE_WORDS: Final = frozenset({"0", "false", "no", "off"})


class A11yConfigError(RelaydeskError):
    """An accessibility setting that cannot be used as given."""


def _flag(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name, "").strip().lower()
    if not raw:
        return default
    if raw in TRUE_WORDS:
        return True
    if raw in FALSE_WORDS:
        return False
    raise A11yConfigError(f"{name}={raw!r}: give true or false")


def _number(env: Mapping[str, str], name: str, default: float, low: float, high: float) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise A11yConfigError(f"{name}={raw!r}: give a number") from None
    if not low <= value <= high:
        raise A11yConfigError(f"{name}={raw!r}: give a number from {low:g} to {high:g}")
    return value


@dataclass(frozen=True)
class A11ySettings:
    """Which apps agents may observe and act on, and how."""

    # Apps (by accessible name or command, lower case) agents may neither observe nor act on:
    # the relay's denied apps, which every agent tool refuses (relay/policy.py).
    deny: tuple[str, ...] = ()
    # Apps agents may observe but not act on.
    read_only: tuple[str, ...] = ()
    # When set, the only apps agents may use at all.
    allow: tuple[str, ...] | None = None
    # Physical input at an element's live bounds when its native action is missing or fails.
    physical_virtual: bool = True
    physical_local: bool = False
    snapshot_ttl_s: float = DEFAULT_SNAPSHOT_TTL_S
    call_timeout_ms: int = DEFAULT_CALL_TIMEOUT_MS
    # The interpreter of the worker (it needs the distribution's GObject bindings).
    python: str | None = None
    extra_env: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> A11ySettings:
        env = os.environ if environ is None else environ
        allow = names_of(env.get("RELAYDESK_A11Y_ALLOW_APPS", ""))
        return cls(
            deny=tuple(sorted(DeniedApps.from_env(env).names)),
            read_only=names_of(env.get("RELAYDESK_A11Y_READ_ONLY_APPS", "")),
            allow=allow or None,
            physical_virtual=_flag(env, "RELAYDESK_A11Y_PHYSICAL", True),
            physical_local=_flag(env, "RELAYDESK_A11Y_LOCAL_PHYSICAL", False),
            snapshot_ttl_s=_number(
                env, "RELAYDESK_A11Y_SNAPSHOT_TTL_S", DEFAULT_SNAPSHOT_TTL_S, 1, 86400
            ),
            call_timeout_ms=int(
                _number(env, "RELAYDESK_A11Y_CALL_TIMEOUT_MS", DEFAULT_CALL_TIMEOUT_MS, 20, 2000)
            ),
            python=env.get("RELAYDESK_A11Y_PYTHON") or None,
        )

    def physical_allowed(self, kind: str) -> bool:
        return self.physical_local if kind == "local" else self.physical_virtual

    def worker_env(self) -> dict[str, str]:
        """What a worker is told of these settings."""
        policy: dict[str, Any] = {
            "deny": list(self.deny),
            "read_only": list(self.read_only),
            "allow": list(self.allow) if self.allow else None,
        }
        return {
            "RELAYDESK_A11Y_POLICY": json.dumps(policy),
            "RELAYDESK_A11Y_SNAPSHOT_TTL_S": f"{self.snapshot_ttl_s:g}",
            "RELAYDESK_A11Y_CALL_TIMEOUT_MS": str(self.call_timeout_ms),
        }
