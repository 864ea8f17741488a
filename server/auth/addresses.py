"""The client address a request is counted and logged under.

It is the connection's peer, unless that peer is one of the reverse proxies named in
``RELAYDESK_TRUSTED_PROXIES`` (addresses or networks, none by default): then the
``X-Forwarded-For`` chain is read from its right end, skipping trusted proxies, and the first
address no trusted proxy vouches for is the client. What a client writes into the header
itself sits to the left of what the proxies appended, so it is never reached. Loopback is not
trusted by default: on a shared host, any local user could otherwise name any address.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Iterable
from typing import Final

from starlette.requests import HTTPConnection

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
FORWARDED_FOR: Final = "x-forwarded-for"
UNKNOWN: Final = "unknown"
# Hops read from the right of X-Forwarded-For at most (a chain of proxies is short).
MAX_HOPS: Final = 16


def parse_networks(entries: Iterable[str]) -> tuple[Network, ...]:
    """``10.0.0.5``, ``10.0.0.0/24`` or ``::1`` → networks; ``ValueError`` naming a bad one."""
    networks = []
    for entry in (e.strip() for e in entries):
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            raise ValueError(f"not an IP address or network: {entry[:64]!r}") from None
    return tuple(networks)


@functools.lru_cache(maxsize=8)
def _networks(entries: tuple[str, ...]) -> tuple[Network, ...]:
    return parse_networks(entries)


def _ip(text: str) -> Address | None:
    try:
        address = ipaddress.ip_address(text.strip())
    except ValueError:
        return None
    mapped = getattr(address, "ipv4_mapped", None)
    return mapped if mapped is not None else address


def _trusted(address: Address | None, networks: tuple[Network, ...]) -> bool:
    return address is not None and any(address in network for network in networks)


def client_address(connection: HTTPConnection, trusted_proxies: tuple[str, ...]) -> str:
    """The address to count and log ``connection`` under (see the module docstring)."""
    peer = connection.client.host if connection.client else UNKNOWN
    networks = _networks(trusted_proxies)
    if not networks or not _trusted(_ip(peer), networks):
        return peer
    chain = ",".join(connection.headers.getlist(FORWARDED_FOR)).split(",")
    client = peer
    for hop in reversed(chain[-MAX_HOPS:]):
        address = _ip(hop)
        if address is None:
            return client  # garbage: the last address a trusted proxy vouched for
        client = str(address)
        if not _trusted(address, networks):
            return client
    return client
