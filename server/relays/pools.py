"""The relays' warm pools (``desktop.pool``), read on demand: for ``/metrics``, the
``desktop_pool`` action, the CLI and the dock (docs/desktops.md, "Warm pool").

A relay's report is its claim: it is checked and bounded here before anyone sees it.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Iterable
from typing import Any, Final

from server.relays.calls import Requester, call
from wire import ops
from wire.errors import OpError
from wire.ids import RelayId

log = logging.getLogger(__name__)

POOL_TIMEOUT_S: Final = 2.0
MAX_PROFILES: Final = 32
MAX_COUNT: Final = 10**9
_PROFILE_RE: Final = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")
_GEOMETRY_RE: Final = re.compile(r"[0-9]{1,5}x[0-9]{1,5}")


async def pool_reports(
    relays: Requester, relay_ids: Iterable[RelayId], timeout_s: float = POOL_TIMEOUT_S
) -> dict[RelayId, ops.PoolReport]:
    """Each relay's checked pool report; a relay that does not answer in time is left out."""
    ids = list(relay_ids)
    answers = await asyncio.gather(
        *(call(relays, r, ops.DESKTOP_POOL, ops.Empty(), timeout_s) for r in ids),
        return_exceptions=True,
    )
    reports: dict[RelayId, ops.PoolReport] = {}
    for relay_id, answer in zip(ids, answers, strict=True):
        if isinstance(answer, OpError | TimeoutError):
            log.info("relay %s did not report its pool: %s", relay_id, type(answer).__name__)
        elif isinstance(answer, BaseException):
            log.warning("relay %s: reading its pool failed", relay_id, exc_info=answer)
        else:
            reports[relay_id] = checked(answer)
    return reports


def checked(report: Any) -> ops.PoolReport:
    """A relay's report with only well-formed fields (a malformed entry is dropped)."""
    profiles = report.get("profiles") if isinstance(report, dict) else None
    geometry = report.get("geometry") if isinstance(report, dict) else None
    return {
        "geometry": geometry
        if isinstance(geometry, str) and _GEOMETRY_RE.fullmatch(geometry)
        else "",
        "profiles": [p for p in map(_profile, profiles if isinstance(profiles, list) else []) if p][
            :MAX_PROFILES
        ],
        "hits": _count(report.get("hits") if isinstance(report, dict) else 0),
        "misses": _count(report.get("misses") if isinstance(report, dict) else 0),
    }


def _profile(entry: object) -> ops.PoolProfile | None:
    if not isinstance(entry, dict):
        return None
    name = entry.get("profile")
    if not isinstance(name, str) or not _PROFILE_RE.fullmatch(name):
        return None
    return {
        "profile": name,
        "size": _count(entry.get("size")),
        "ready": _count(entry.get("ready")),
        "starting": _count(entry.get("starting")),
    }


def _count(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        return 0
    return min(max(value, 0), MAX_COUNT)
