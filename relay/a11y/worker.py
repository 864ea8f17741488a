"""The accessibility worker: observes and acts on one desktop's accessibility tree (AT-SPI).

One worker runs per desktop, started on first use by the relay (``relay/a11y/client.py``) as
the desktop's user, with the desktop's environment (its display and session bus), under the
system's Python: the GObject bindings it needs are the distribution's, built for that
interpreter only. It imports nothing of relaydesk but its own modules (``client.MODULES``:
this package's D-Bus and AT-SPI modules, ``wire.errors`` and the pure selector parser
``wire.a11y_selector``), which travel to it on its standard input.

It answers JSON lines, one call at a time (``relay/a11y/protocol.py``). Calls: ``apps``,
``observe``, ``find``, ``read``, ``act``, ``text`` (an element's text, read back after physical
typing) and ``wait`` (docs/accessibility.md). Elements come back as qualified refs
``@<snapshot>:<element>``; a snapshot lives ``RELAYDESK_A11Y_SNAPSHOT_TTL_S`` in a bounded LRU,
and every ref keeps the locator that found it, so it is re-resolved against the live tree right
before any action.

Where each part lives:

- the bus: ``bus.py`` (events, pipelined calls), ``nodes.py`` (nodes, trees, calls),
  ``roles.py`` (role and state tokens), ``reads.py`` (an app's tree read), ``toolkits.py``
  (what differs between Qt, GTK and Chromium);
- what the worker keeps: ``session.py`` (bus, policy, apps, trees, snapshots; a call's scope),
  ``apps.py`` (apps, windows, policy), ``trees.py`` (kept trees, details, walks), ``refs.py``
  (snapshots and locators);
- the calls: ``observe.py`` (``apps``, ``observe``), ``find.py`` (``find``, ``wait``),
  ``elements.py`` (``read``, ``text``), ``actions.py`` (``act``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, Final

from relay.a11y.actions import act
from relay.a11y.apps import Policy
from relay.a11y.bus import Bus
from relay.a11y.elements import read, text
from relay.a11y.find import find, wait
from relay.a11y.nodes import CallFailed
from relay.a11y.observe import list_apps, observe
from relay.a11y.protocol import CALL_TIMEOUT_MS, Handler, reply, serve
from relay.a11y.session import Session

# The calls the worker answers, by name.
CALLS: Final[dict[str, Callable[[Session, dict[str, Any]], dict[str, Any]]]] = {
    "apps": list_apps,
    "observe": observe,
    "find": find,
    "read": read,
    "act": act,
    "text": text,
    "wait": wait,
}


def main() -> None:
    """Connect to the desktop's accessibility bus, say whether that worked, then serve."""
    try:
        bus = Bus(CALL_TIMEOUT_MS, max(4 * CALL_TIMEOUT_MS, 1000), skip_s=10.0)
    except CallFailed as err:
        reply({"ready": False, "reason": str(err)})
        return
    except ImportError as err:
        reply({"ready": False, "reason": f"no GObject bindings for this Python: {err}"})
        return
    session = Session(bus, Policy.from_env())
    calls: dict[str, Handler] = {
        name: functools.partial(call, session) for name, call in CALLS.items()
    }
    reply({"ready": True})
    serve(calls, bus)


if __name__ == "__main__":
    main()
