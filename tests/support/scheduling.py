"""How the whole suite spreads over pytest-xdist workers (``scripts/test``: ``-n N --dist
loadgroup``).

The unit of work is a test file: its module-scoped fixtures (a server, relays, a desktop stack)
start once, on one worker. Tests that share something the machine has only one of form a named
group instead, wherever their files are; a group's tests run one after another on one worker:

* ``docker``: the images' fixed tags (``relaydesk/*:dev``), which one test builds while another
  runs containers of them; the quick run of ``bench_docker_desktops`` names this group too.
* ``bench``: the quick benchmark runs, the soak and the replica storm, which time what they do
  (ratios against a baseline of the same run): two of them at once would time each other.

A module can name its own group with ``pytestmark = pytest.mark.xdist_group("name")`` (kept as
it is). The longest kinds of work are handed out first (groups, then the tiers that start
processes, the unit tier last) so that no worker starts a long file when the others are done.
"""

from __future__ import annotations

import pytest
from xdist.scheduler import LoadGroupScheduling  # type: ignore[import-untyped]

# The group a test of a tier joins when its module names none.
GROUP_OF_TIER = {"docker": "docker", "bench": "bench"}
# Which work is handed out first: the long groups, then the tiers that start processes.
_FIRST = ("docker", "bench", "cluster", "e2e", "integration", "unit")


def _tier(item: pytest.Item, tiers: tuple[str, ...]) -> str:
    return next((mark.name for mark in item.iter_markers() if mark.name in tiers), "")


def mark_groups(items: list[pytest.Item], tiers: tuple[str, ...]) -> None:
    """Give each test of a shared-resource tier its group, and hand the longest work out
    first (a stable sort: the order of tests within a file is kept)."""
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        group = GROUP_OF_TIER.get(_tier(item, tiers))
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    items.sort(key=lambda item: _rank(item, tiers))


def _rank(item: pytest.Item, tiers: tuple[str, ...]) -> int:
    if item.get_closest_marker("xdist_group") is not None:
        return 0
    tier = _tier(item, tiers)
    return _FIRST.index(tier) if tier in _FIRST else len(_FIRST)


def group_of(nodeid: str) -> str | None:
    """The group xdist appended to a node id (``path::test@group``), or None."""
    if nodeid.rfind("@") > nodeid.rfind("]"):
        return nodeid.rsplit("@", 1)[1]
    return None


def without_group(nodeid: str) -> str:
    """The node id a user types (``path::test``), without xdist's ``@group``."""
    return nodeid.rsplit("@", 1)[0] if group_of(nodeid) is not None else nodeid


class FileOrGroupScheduling(LoadGroupScheduling):  # type: ignore[misc]
    """Hand out whole files, or whole groups, in collection order (``mark_groups`` sorted it)."""

    def __init__(self, config: pytest.Config, log: object = None) -> None:
        super().__init__(config, log)
        # The collection order is already the order of work (longest first); xdist's own
        # reordering (by number of tests) would put thousands of millisecond tests first.
        config.option.loadscopereorder = False

    def _split_scope(self, nodeid: str) -> str:
        group = group_of(nodeid)
        return f"@{group}" if group is not None else nodeid.split("::", 1)[0]
