"""Protection against server-side request forgery: where a webhook may point, and where a
delivery may connect.

Outside `demo-` projects a URL must be https and its host must resolve only to public addresses
(not private, loopback, link-local, site-local, shared, reserved or multicast; an IPv4 address
embedded in an IPv6 one, mapped, compatible, NAT64 (64:ff9b::/96; 64:ff9b:1::/48 is private),
6to4 or Teredo, is judged as that IPv4 address). It is checked when the webhook is created and
again at every connection: the HTTP client's network backend resolves the host, checks every
address, and connects to an address it checked, so a DNS answer that changes between the check
and the connection (rebinding) reaches nothing private. TLS still verifies the certificate
against the URL's host name. Redirects are not followed and proxies from the environment are
ignored. In `demo-` projects http and loopback addresses are allowed too (local receivers);
private networks and link-local addresses (the metadata server) are refused there as well.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpcore
import httpx

IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
# host, port -> the addresses it resolves to
Resolver = Callable[[str, int], Sequence[str]]


class AddressRefused(ValueError):
    """The URL or an address it resolves to is not one a webhook may reach."""


def resolve_host(host: str, port: int) -> list[str]:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise AddressRefused(f"{host} does not resolve: {exc}") from exc
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


# NAT64's well-known prefix (RFC 6052): the last 32 bits are the IPv4 address it reaches.
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
# IPv4-compatible addresses (deprecated, RFC 4291): ::a.b.c.d.
_IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")


def _embedded_ipv4(address: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 one reaches through a translation or tunnel: mapped and
    compatible forms, NAT64, 6to4 and Teredo (its server and its client)."""
    if address.ipv4_mapped is not None:
        return [address.ipv4_mapped]
    if address.sixtofour is not None:
        return [address.sixtofour]
    if address.teredo is not None:
        return list(address.teredo)
    if address in _NAT64 or address in _IPV4_COMPATIBLE:
        return [ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)]
    return []


@dataclass(frozen=True)
class AddressPolicy:
    allow_local: bool  # demo- projects: http and loopback addresses too

    @property
    def schemes(self) -> tuple[str, ...]:
        return ("https", "http") if self.allow_local else ("https",)

    def allows(self, address: IpAddress) -> bool:
        if self.allow_local and address.is_loopback:
            return True
        if isinstance(address, ipaddress.IPv6Address):
            embedded = _embedded_ipv4(address)
            if embedded:
                return all(self.allows(ipv4) for ipv4 in embedded)
            # Python counts site-local (fec0::/10, deprecated) and reserved ranges as global.
            if address.is_site_local or address.is_reserved:
                return False
        return address.is_global and not address.is_multicast and not address.is_reserved

    def check_addresses(self, host: str, addresses: Iterable[str]) -> list[str]:
        """All of `addresses` if every one is allowed; a host that also resolves to a private
        address is refused outright."""
        checked = list(addresses)
        if not checked:
            raise AddressRefused(f"{host} resolves to no address")
        for text in checked:
            try:
                address = ipaddress.ip_address(text.split("%", 1)[0])  # no IPv6 zone
            except ValueError as exc:
                raise AddressRefused(f"{host} resolves to {text!r}, not an address") from exc
            if not self.allows(address):
                raise AddressRefused(f"{host} resolves to {text}, which is not a public address")
        return checked

    def check_url(self, url: str, resolve: Resolver = resolve_host) -> str:
        """The URL if a webhook may point at it (its host resolved and checked now)."""
        try:
            parts = urlsplit(url)
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError as exc:
            raise AddressRefused(f"not a URL: {exc}") from exc
        if parts.scheme not in self.schemes:
            raise AddressRefused(f"the URL must use {' or '.join(self.schemes)}")
        if parts.username is not None or parts.password is not None:
            raise AddressRefused("the URL must not carry credentials")
        if not parts.hostname:
            raise AddressRefused("the URL has no host")
        if parts.fragment:
            raise AddressRefused("the URL must not have a fragment")
        self.check_addresses(parts.hostname, resolve(parts.hostname, port))
        return url


class GuardedBackend(httpcore.NetworkBackend):
    """httpcore's network backend, resolving and checking before every connection and connecting
    only to the addresses it checked."""

    def __init__(self, policy: AddressPolicy, resolve: Resolver = resolve_host) -> None:
        self._policy = policy
        self._resolve = resolve
        self._tcp = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        *others, last = self._policy.check_addresses(host, self._resolve(host, port))
        for address in others:
            try:
                return self._tcp.connect_tcp(address, port, timeout, local_address, socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout):
                continue  # the next address the name resolved to
        return self._tcp.connect_tcp(last, port, timeout, local_address, socket_options)

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        raise AddressRefused("webhooks never connect to a unix socket")


class GuardedTransport(httpx.HTTPTransport):
    """httpx's transport over a connection pool whose every connection goes through
    GuardedBackend. httpx builds its pool without a way to name the network backend, so the
    pool is built again here with the same settings and the backend (httpcore's public hook)."""

    def __init__(
        self, policy: AddressPolicy, *, max_connections: int, resolve: Resolver = resolve_host
    ) -> None:
        super().__init__(trust_env=False)
        self._pool = httpcore.ConnectionPool(
            ssl_context=httpx.create_ssl_context(trust_env=False),
            max_connections=max_connections,
            max_keepalive_connections=max_connections,
            keepalive_expiry=5.0,
            network_backend=GuardedBackend(policy, resolve),
        )


def client(
    policy: AddressPolicy,
    *,
    timeout: float,
    max_connections: int,
    resolve: Resolver = resolve_host,
) -> httpx.Client:
    return httpx.Client(
        transport=GuardedTransport(policy, max_connections=max_connections, resolve=resolve),
        timeout=httpx.Timeout(timeout),
        follow_redirects=False,
        trust_env=False,
        headers={"User-Agent": "codedrop-webhooks/1"},
    )
