"""Fetching a file by a URL that came from outside (BEHAVIOUR §6a), both ways: a platform's
attachment URL or a redirect it answers with, a reply's `MEDIA:` URL.

Every hop is checked before it is followed:
- a host the operator configured (a platform's API base URL, a host list of the platform's
  settings) is trusted as it is: it may be a self-hosted server on a private network, or a
  loopback fake in local mode and the tests;
- any other host must be https to public addresses only, every address it resolves to: private,
  loopback, link-local (169.254.169.254, the metadata service), shared, reserved and multicast
  addresses are refused, and so are the IPv6 forms that embed an IPv4 address (NAT64
  `64:ff9b::/96` and `64:ff9b:1::/48`, IPv4-compatible `::/96`, 6to4 `2002::/16`, Teredo
  `2001::/32`; an IPv4-mapped `::ffff:a.b.c.d` is judged as the IPv4 address it is) and
  site-local `fec0::/10`. Local mode (`local`) also takes http(s) to loopback. The host is
  resolved once and the download connects to the address that was checked, so a second DNS
  answer (a rebinding name) cannot lead it elsewhere.
Redirects are followed here (at most http_pool.MAX_REDIRECTS), each checked the same way; the
caller's headers (its credentials) go to the first URL's host only, never to a redirect's other
host. One deadline bounds the whole fetch, however slowly a server trickles.
"""

from __future__ import annotations

import ipaddress
import socket
import time
import urllib.parse
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import BinaryIO

from hermes_gateway import http_pool

Resolver = Callable[[str], list[str]]
Address = ipaddress.IPv4Address | ipaddress.IPv6Address

# IPv6 networks whose addresses carry an IPv4 address a gateway or tunnel would reach (RFC 6052,
# RFC 8215, RFC 4291's deprecated compatible form, RFC 3056, RFC 4380), and site-local (RFC 3879):
# none is a public host of its own, and each may lead to a private IPv4 address.
_REFUSED_V6 = tuple(
    ipaddress.IPv6Network(n) for n in ("64:ff9b::/96", "64:ff9b:1::/48", "::/96", "2002::/16", "2001::/32", "fec0::/10")
)


class Refused(Exception):
    """The URL may not be fetched; the text says why, never the URL (it may carry a token)."""


@dataclass(frozen=True)
class Policy:
    """Where a fetch may go: `trusted` hosts as they are (`*.example.com`: its subdomains), any
    other only to public addresses over https, and loopback too when `local`."""

    trusted: Collection[str] = ()
    local: bool = False
    resolve: Resolver | None = None  # host -> addresses; None: the system's resolver


def host_listed(host: str, hosts: Collection[str]) -> bool:
    """Whether `host` is one of `hosts` (an entry `*.example.com` stands for its subdomains)."""
    host = host.lower()
    return any(host.endswith(entry[1:].lower()) if entry.startswith("*.") else host == entry.lower() for entry in hosts)


def public(address: Address) -> bool:
    """Whether an address is a public unicast host's."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return public(address.ipv4_mapped)
        if any(address in network for network in _REFUSED_V6):
            return False
    return address.is_global and not address.is_multicast


def check(url: str, policy: Policy) -> str | None:
    """Raise Refused unless `url` may be fetched; the address to connect to (None: a trusted
    host, connected to by its name)."""
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname or ""
        parts.port  # noqa: B018 - a malformed port raises here
    except ValueError:
        raise Refused("not a usable URL") from None
    if parts.scheme not in ("https", "http") or not host or parts.username is not None:
        raise Refused("only https URLs are fetched")
    if host_listed(host, policy.trusted):
        return None
    addresses = _addresses(host, policy.resolve)
    if policy.local and all(address.is_loopback for address in addresses):
        return str(addresses[0])
    if parts.scheme != "https":
        raise Refused("only https URLs are fetched")
    if not all(public(address) for address in addresses):
        raise Refused("the URL's host is not a public address")
    return str(addresses[0])


def fetch(
    url: str,
    policy: Policy,
    *,
    limit: int,
    timeout: float,
    headers: Mapping[str, str] | None = None,
    deadline: float | None = None,
    sink: BinaryIO | None = None,
) -> http_pool.Reply:
    """GET `url` (at most `limit` bytes; into `sink` when given), each hop checked first. The
    last answer comes back, whatever its status. Raises Refused, http_pool.TooLarge, NoAnswer or
    Unsendable; a fetch still going at `deadline` (time.monotonic()) is NoAnswer("timeout")."""
    sent = dict(headers or {})
    first_host = _host(url)
    for _hop in range(http_pool.MAX_REDIRECTS + 1):
        address = check(url, policy)
        if deadline is not None and time.monotonic() >= deadline:
            raise http_pool.NoAnswer("timeout", "no time was left for the download")
        reply = http_pool.download(
            url, headers=sent, timeout=timeout, limit=limit, redirects=False, connect_to=address,
            sink=sink, deadline=deadline,
        )  # fmt: skip
        moved = reply.headers.get("location") if 300 <= reply.status < 400 else None
        if moved is None:
            return reply
        url = urllib.parse.urljoin(url, moved)
        if _host(url) != first_host:
            sent = {}  # the caller's credentials stay with the host they were meant for
    raise Refused("the URL redirects too often")


def _host(url: str) -> str:
    try:
        parts = urllib.parse.urlsplit(url)
        return f"{parts.scheme}://{(parts.hostname or '').lower()}:{parts.port or ''}"
    except ValueError:
        return ""


def _addresses(host: str, resolve: Resolver | None) -> list[Address]:
    try:
        found = (resolve or _system_resolve)(host)
        addresses = [ipaddress.ip_address(a.split("%", 1)[0]) for a in found]
    except (OSError, ValueError, UnicodeError):
        raise Refused("the URL's host cannot be resolved") from None
    if not addresses:
        raise Refused("the URL's host cannot be resolved")
    # An IPv4-mapped IPv6 address (::ffff:10.0.0.1) is judged, and connected to, as its IPv4 address.
    return [a.ipv4_mapped if isinstance(a, ipaddress.IPv6Address) and a.ipv4_mapped else a for a in addresses]


def _system_resolve(host: str) -> list[str]:
    return [str(info[4][0]) for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)]
