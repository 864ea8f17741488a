"""How the whole suite spreads over pytest-xdist workers (``scripts/test``: ``-n N --dist
loadgroup``).

The unit of work is a test file: its module-scoped fixtures (a server, relays, a desktop stack)
start once, on one worker. Tests that share something the machine has only one of form a named
group instead, wherever their files are; a group's tests run one after another on one worker:

* ``docker``: the images' fixed tags (``relaydesk/*:dev``), which one test builds while another
  runs containers of them; the quick run of ``bench_docker_desktops`` names this group too.
* ``bench``: the soak and the replica storm, whose verdicts are times (recovery within
  seconds): two of them at once would time each other. The quick benchmark runs check that a
  benchmark runs and reports, not its figures: each is a unit of work of its own
  (``quick-<benchmark>``), so they spread over the workers.

A module can name its own group with ``pytest.mark.xdist_group("name")`` in its ``pytestmark``
(kept as it is). The longest kinds of work are handed out first (groups, then the tiers that
start processes, the unit tier last) so that no worker starts a long file when the others are
done.

Workers tell the controller each test's group through a file: xdist's own way (a ``@group``
suffix on the node id) does nothing under pytest 9, whose node ids are not the attribute xdist
sets, and the groups were silently ignored.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from xdist.scheduler import LoadGroupScheduling  # type: ignore[import-untyped]

# The group a test of a tier joins when its module names none.
GROUP_OF_TIER = {"docker": "docker", "bench": "bench"}
# Which work is handed out first: the long groups, then the tiers that start processes.
_FIRST = ("docker", "bench", "cluster", "e2e", "integration", "unit")
# The worker input that names the file the workers write the groups to.
GROUPS_FILE_KEY = "relaydesk_groups_file"


def _tier(item: pytest.Item, tiers: tuple[str, ...]) -> str:
    return next((mark.name for mark in item.iter_markers() if mark.name in tiers), "")


def group_of_item(item: pytest.Item) -> str | None:
    mark = item.get_closest_marker("xdist_group")
    if mark is None:
        return None
    return str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))


def mark_groups(items: list[pytest.Item], tiers: tuple[str, ...]) -> dict[str, str]:
    """Give each test of a shared-resource tier its group and hand the longest work out first
    (a stable sort: the order of tests within a file is kept); the groups by node id."""
    for item in items:
        if item.get_closest_marker("xdist_group") is None and (
            group := GROUP_OF_TIER.get(_tier(item, tiers))
        ):
            item.add_marker(pytest.mark.xdist_group(group))
    items.sort(key=lambda item: _rank(item, tiers))
    return {item.nodeid: group for item in items if (group := group_of_item(item)) is not None}


def _rank(item: pytest.Item, tiers: tuple[str, ...]) -> int:
    if item.get_closest_marker("xdist_group") is not None:
        return 0
    tier = _tier(item, tiers)
    return _FIRST.index(tier) if tier in _FIRST else len(_FIRST)


def write_groups(path: Path, groups: dict[str, str]) -> None:
    """A worker's groups, for the controller (every worker collects the same tests)."""
    partial = path.with_name(f"{path.name}.{os.getpid()}")
    partial.write_text(json.dumps(groups), encoding="utf-8")
    partial.replace(path)


def without_group(nodeid: str) -> str:
    """The node id a user types (``path::test``), without a ``@group`` suffix xdist may add."""
    return nodeid.rsplit("@", 1)[0] if nodeid.rfind("@") > nodeid.rfind("]") else nodeid


class FileOrGroupScheduling(LoadGroupScheduling):  # type: ignore[misc]
    """Hand out whole files, or whole groups, in collection order (``mark_groups`` sorted it)."""

    def __init__(self, config: pytest.Config, log: object, groups_file: Path) -> None:
        super().__init__(config, log)
        self._groups_file = groups_file
        self._groups: dict[str, str] | None = None
        # The collection order is already the order of work (longest first); xdist's own
        # reordering (by number of tests) would put thousands of millisecond tests first.
        config.option.loadscopereorder = False

    def _split_scope(self, nodeid: str) -> str:
        if self._groups is None:  # first asked once every worker has collected
            self._groups = json.loads(self._groups_file.read_text(encoding="utf-8"))
        nodeid = without_group(nodeid)
        group = self._groups.get(nodeid)
        return f"@{group}" if group is not None else nodeid.split("::", 1)[0]
