"""Protection against server-side request forgery: where a webhook may point, and where a
delivery may connect.

Outside `demo-` projects a URL must be https and its host must resolve only to public addresses
(not private, loopback, link-local, shared, reserved or multicast; an IPv4 address embedded in an
IPv6 one is judged as IPv4). It is checked when the webhook is created and again at every
connection: the HTTP client's network backend resolves the host, checks every address, and
connects to an address it checked, so a DNS answer that changes between the check and the
connection (rebinding) reaches nothing private. TLS still verifies the certificate against the
URL's host name. Redirects are not followed and proxies from the environment are ignored. In
`demo-` projects http and loopback addresses are allowed too (local receivers); private networks
and link-local addresses (the metadata server) are refused there as well.
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


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    return address.teredo[1] if address.teredo is not None else None


@dataclass(frozen=True)
class AddressPolicy:
    allow_local: bool  # demo- projects: http and loopback addresses too

    @property
    def schemes(self) -> tuple[str, ...]:
        return ("https", "http") if self.allow_local else ("https",)

    def allows(self, address: IpAddress) -> bool:
        if isinstance(address, ipaddress.IPv6Address):
            embedded = _embedded_ipv4(address)
            if embedded is not None:
                return self.allows(embedded)
        if self.allow_local and address.is_loopback:
            return True
        return address.is_global and not address.is_multicast

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
