"""The control policy of each relay: the server's settings, with per-relay grant overrides.

``RELAYDESK_AGENT_GRANT_RELAYS`` is a JSON object naming relays (by name or id), each with any
of ``budget`` (actions per grant, 1..1,000,000) and ``idle_s`` (seconds without an action
before a grant expires, 1..86,400), e.g. ``{"lab-pc": {"budget": 200, "idle_s": 60}}``.
Anything else is refused when the server starts, naming the relay and the key.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any, Final

from server.config import ConfigError, Settings
from server.control.model import ControlPolicy

ENV: Final = "RELAYDESK_AGENT_GRANT_RELAYS"
LIMITS: Final[dict[str, tuple[float, float]]] = {"budget": (1, 1_000_000), "idle_s": (1, 86_400)}


def _override(relay: str, values: Any) -> dict[str, float]:
    if not isinstance(values, dict):
        raise ConfigError(f'{ENV}: {relay!r} must map to an object such as {{"budget": 100}}')
    checked: dict[str, float] = {}
    for name, value in values.items():
        if name not in LIMITS:
            raise ConfigError(f"{ENV}: {relay!r} has {name!r}; only budget and idle_s exist")
        low, high = LIMITS[name]
        numeric = isinstance(value, int | float) and not isinstance(value, bool)
        if not numeric or not low <= value <= high or (name == "budget" and value % 1):
            raise ConfigError(f"{ENV}: {relay!r} {name} must be a number from {low:g} to {high:g}")
        checked[name] = value
    return checked


def parse_overrides(raw: str) -> dict[str, dict[str, float]]:
    """The per-relay overrides in ``raw`` (empty: none); ``ConfigError`` naming what is wrong."""
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw)
    except ValueError as err:
        raise ConfigError(f"{ENV} is not JSON: {err}") from err
    if not isinstance(data, dict):
        raise ConfigError(f"{ENV} must be a JSON object of relay names")
    return {str(relay): _override(str(relay), values) for relay, values in data.items()}


@dataclass(frozen=True)
class PolicyBook:
    """The default policy and the relays that override its grants."""

    default: ControlPolicy
    overrides: dict[str, ControlPolicy] = field(default_factory=dict)

    @classmethod
    def from_settings(cls, settings: Settings) -> PolicyBook:
        default = ControlPolicy(
            takeover_idle_s=settings.takeover_idle_s,
            regrant_cooldown_s=settings.agent_regrant_cooldown_s,
            grant_budget=settings.agent_grant_budget,
            grant_idle_s=settings.agent_grant_idle_s,
        )
        overrides = {
            relay: replace(
                default,
                grant_budget=int(values.get("budget", default.grant_budget)),
                grant_idle_s=float(values.get("idle_s", default.grant_idle_s)),
            )
            for relay, values in parse_overrides(settings.agent_grant_relays).items()
        }
        return cls(default, overrides)

    def for_relay(self, relay_id: str, name: str | None = None) -> ControlPolicy:
        """The policy of a relay, by id or by name."""
        found = self.overrides.get(relay_id) or (self.overrides.get(name) if name else None)
        return found or self.default
