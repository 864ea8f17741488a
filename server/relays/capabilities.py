"""What a relay may use of the capabilities it announces in its ``hello``."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from server.db.records import RelayRecord

log = logging.getLogger(__name__)

DIRECT_VNC = "direct_vnc"


def granted_capabilities(relay: RelayRecord, announced: Iterable[str]) -> frozenset[str]:
    """What the server lets the relay use of what it announced.

    ``direct_vnc`` makes the server open a loopback connection itself: only a relay the operator
    registered as co-located (``admin add-relay --co-located``) gets it.
    """
    granted = frozenset(announced)
    if DIRECT_VNC in granted and not relay.co_located:
        log.warning(
            "relay %s announced %s but is not registered as co-located: ignored",
            relay.name,
            DIRECT_VNC,
        )
        granted -= {DIRECT_VNC}
    return granted
