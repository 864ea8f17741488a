"""Helpers shared by the test suites: child processes, ports, scaled timeouts, services.

Import from the modules themselves (``tests.support.processes``, ``tests.support.xvfb``, …);
the names below are re-exported for convenience.
"""

from tests.support.processes import (
    ManagedProcess,
    ProcessExited,
    ProcessFactory,
    ProcessTimeout,
    ProcessTracker,
    free_port,
    port_is_open,
    scaled,
    timeout_scale,
)

__all__ = [
    "ManagedProcess",
    "ProcessExited",
    "ProcessFactory",
    "ProcessTimeout",
    "ProcessTracker",
    "free_port",
    "port_is_open",
    "scaled",
    "timeout_scale",
]
