"""Which ``Host`` and ``Origin`` a request may name: the DNS-rebinding and cross-site rules.

A DNS-rebinding page reaches the server under a name its attacker controls, so the ``Host`` it
sends is that name. The server answers only to names it knows: the host of
``RELAYDESK_PUBLIC_URL``, the names in ``RELAYDESK_ALLOWED_HOSTS``, loopback names
(``localhost``, ``*.localhost``) and IP addresses — an attacker cannot make a browser send an
IP literal or a loopback name for a site it serves. ``relaydesk up`` prints
``http://127.0.0.1:<port>``, which passes.

A browser's ``Origin`` (when sent) must be the public URL's origin, or the very origin of the
request's own allowed ``Host``: another site, another port on the same host, or ``null`` is
refused.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

from wire.errors import ErrorCode, RequestRejected

_HOST: Final = re.compile(r"(\[[0-9A-Fa-f:.]{2,45}\]|[A-Za-z0-9_.-]{1,253})(?::([0-9]{1,5}))?")
_DEFAULT_PORTS: Final = {"http": "80", "https": "443", "ws": "80", "wss": "443"}


class CrossOrigin(RequestRejected):
    """A browser request sent by a page of another origin."""

    status = 403

    def __init__(self) -> None:
        super().__init__(ErrorCode.FORBIDDEN, "cross-origin request refused", {"field": "Origin"})


def split_host(value: str) -> tuple[str, str | None] | None:
    """``Host`` header → (lower-case hostname without brackets, port or None); None if malformed."""
    match = _HOST.fullmatch(value.strip())
    if match is None:
        return None
    return match.group(1).strip("[]").lower().rstrip("."), match.group(2)


def is_self_evident(hostname: str) -> bool:
    """A loopback name or an IP literal: no DNS answer an attacker controls can produce it."""
    if hostname == "localhost" or hostname.endswith(".localhost"):
        return True
    try:
        ipaddress.ip_address(hostname)
    except ValueError:
        return False
    return True


def _netloc(hostname: str, port: str | None, scheme: str | None) -> str:
    """``host[:port]`` with the scheme's default port left out (both sides compare alike)."""
    default = port in {"80", "443"} and (scheme is None or _DEFAULT_PORTS[scheme] == port)
    if port is None or default:
        return hostname
    return f"{hostname}:{port}"


@dataclass(frozen=True)
class HostPolicy:
    """The names this server answers to, and the public origin browsers use."""

    public_host: str | None = None
    public_netloc: str | None = None
    extra_hosts: frozenset[str] = frozenset()

    @classmethod
    def build(cls, public_url: str, extra_hosts: Iterable[str] = ()) -> HostPolicy:
        extra = frozenset(h.strip().lower() for h in extra_hosts if h.strip())
        parts = urlsplit(public_url) if public_url else None
        if parts is None or not parts.hostname or parts.scheme not in _DEFAULT_PORTS:
            return cls(None, None, extra)
        port = str(parts.port) if parts.port is not None else None
        hostname = parts.hostname.lower().rstrip(".")
        return cls(hostname, _netloc(hostname, port, parts.scheme), extra)

    def host_allowed(self, host: str | None) -> bool:
        """A request without ``Host`` (HTTP/1.0, not a browser) passes; unknown names do not."""
        if not host:
            return True
        parsed = split_host(host)
        return parsed is not None and self._known(parsed[0])

    def _known(self, hostname: str) -> bool:
        return (
            hostname == self.public_host
            or hostname in self.extra_hosts
            or is_self_evident(hostname)
        )

    def origin_allowed(self, origin: str | None, host: str | None) -> bool:
        """No ``Origin`` (not a browser) passes; else the public origin or the request's own."""
        if origin is None:
            return True
        parts = urlsplit(origin.strip())
        try:
            port = str(parts.port) if parts.port is not None else None
        except ValueError:
            return False
        if parts.scheme not in _DEFAULT_PORTS or not parts.hostname or parts.path:
            return False
        netloc = _netloc(parts.hostname.lower().rstrip("."), port, parts.scheme)
        if self.public_netloc is not None and netloc == self.public_netloc:
            return True
        own = split_host(host or "")
        if own is None or not self._known(own[0]):
            return False
        return netloc == _netloc(own[0], own[1], None)
