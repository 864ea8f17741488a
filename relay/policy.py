"""Which apps of a relay's desktops agents may not see or touch (``RELAYDESK_DENY_APPS``).

One definition for every agent door on the relay: the accessibility tools (``relay/a11y``),
the screen tool (``relay/screen``: masked pixels, refused input) and the window and clipboard
tools (``relay/desktop_tools``). An app is known by the names :func:`app_ids` gives it — what it
calls itself (its accessible name, its X window's ``WM_CLASS``) and its process's command
(``/proc/<pid>/comm``) — lower case; it is denied when one of them is listed.

Standard library only: the accessibility worker, run under the system's Python, carries this
module in its code bundle (``relay/a11y/client.py``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

DENY_ENV: Final = "RELAYDESK_DENY_APPS"
# The setting's first name, from when only the accessibility tools read it: still read.
LEGACY_DENY_ENV: Final = "RELAYDESK_A11Y_DENY_APPS"
DENIED_MESSAGE: Final = f"denied by this relay's policy ({DENY_ENV})"
# A relay's denied apps, sent with each screen request to its host helper (a JSON list of
# names, ASCII-escaped); the helper denies them besides its own (docs/host-helper.md).
DENY_APPS_HEADER: Final = "X-Relaydesk-Deny-Apps"


def names_of(raw: str) -> tuple[str, ...]:
    """A comma-separated list of app names, lower case, sorted, without blanks or repeats."""
    return tuple(sorted({n.strip().lower() for n in raw.split(",") if n.strip()}))


def command_of(pid: int | None) -> str | None:
    """The command of process ``pid`` (``/proc/<pid>/comm``); None when it is gone."""
    if pid is None or pid <= 0:
        return None
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8") as f:
            return f.read().strip() or None
    except (OSError, UnicodeDecodeError):
        return None


def app_ids(names: Iterable[str | None], command: str | None) -> frozenset[str]:
    """The names an app is known by, lower case: what it calls itself, and its command."""
    return frozenset(n.strip().lower() for n in (*names, command) if n and n.strip())


@dataclass(frozen=True)
class DeniedApps:
    """The apps agents may neither observe nor act on, by name (lower case)."""

    names: frozenset[str] = frozenset()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> DeniedApps:
        """``RELAYDESK_DENY_APPS`` and its first name ``RELAYDESK_A11Y_DENY_APPS``: names
        in either are denied."""
        env = os.environ if environ is None else environ
        raw = f"{env.get(DENY_ENV, '')},{env.get(LEGACY_DENY_ENV, '')}"
        return cls(frozenset(names_of(raw)))

    def __bool__(self) -> bool:
        return bool(self.names)

    def denies(self, ids: Iterable[str]) -> bool:
        """Whether an app known by ``ids`` (:func:`app_ids`) is denied."""
        return not self.names.isdisjoint(ids)
