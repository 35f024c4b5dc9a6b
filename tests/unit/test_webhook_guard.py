"""Server-side request forgery: which URLs a webhook may have, and where a delivery connects."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest

from devkit.receiver import Received, Receiver
from shared.clock import utcnow
from shared.webhooks import guard
from shared.webhooks.delivery import Attempt, Endpoint, attempt
from shared.webhooks.guard import AddressPolicy, AddressRefused, GuardedBackend
from tests.unit.test_webhook_schedule import pending_delivery

PRODUCTION = AddressPolicy(allow_local=False)
DEMO = AddressPolicy(allow_local=True)
PUBLIC = "93.184.216.34"


def resolver(table: dict[str, list[str]]) -> guard.Resolver:
    def resolve(host: str, port: int) -> Sequence[str]:
        return table.get(host, [host])  # an address resolves to itself

    return resolve


@pytest.mark.parametrize(
    "url",
    [
        "http://hooks.example/codedrop",  # not https
        "ftp://hooks.example/codedrop",
        "https://user:pass@hooks.example/",  # credentials in the URL
        "https://hooks.example/#frag",
        "https:///no-host",
        "https://hooks.example:99999/",
        "https://127.0.0.1/",
        "https://localhost/",
        "https://10.0.0.8/",
        "https://172.16.5.4/",
        "https://192.168.1.1/",
        "https://169.254.169.254/computeMetadata/v1/",  # the metadata server
        "https://100.64.0.1/",  # shared address space (carrier NAT)
        "https://0.0.0.0/",
        "https://224.0.0.1/",  # multicast
        "https://[::1]/",
        "https://[fe80::1]/",
        "https://[fd00::1]/",  # unique local
        "https://[::ffff:127.0.0.1]/",  # IPv4-mapped loopback
        "https://[2002:a00:1::]/",  # 6to4 of 10.0.0.1
        "https://[::7f00:1]/",  # IPv4-compatible 127.0.0.1
        "https://[64:ff9b::a9fe:a9fe]/",  # NAT64 of 169.254.169.254
        "https://[64:ff9b:1::a9fe:a9fe]/",  # local-use NAT64
        "https://[fec0::1]/",  # site-local
        "https://[2001:0:4136:e378:8000:63bf:f5ff:fffe]/",  # Teredo of 10.0.0.1
        "https://[100::1]/",  # discard-only
        "https://mixed.example/",  # one public and one private answer
        "https://nowhere.example/",  # resolves to nothing
    ],
)
def test_production_refuses(url: str) -> None:
    resolve = resolver(
        {
            "hooks.example": [PUBLIC],
            "localhost": ["127.0.0.1", "::1"],
            "mixed.example": [PUBLIC, "10.1.2.3"],
            "nowhere.example": [],
        }
    )
    with pytest.raises(AddressRefused):
        PRODUCTION.check_url(url, resolve)


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.example/codedrop?shop=1",
        f"https://{PUBLIC}:8443/",
        "https://[2606:4700::1111]/",
        "https://[64:ff9b::5db8:d822]/",  # NAT64 of a public address
    ],
)
def test_production_accepts_https_to_public_addresses(url: str) -> None:
    assert PRODUCTION.check_url(url, resolver({"hooks.example": [PUBLIC]})) == url


def test_demo_projects_allow_http_and_loopback_but_no_private_network() -> None:
    assert DEMO.check_url("http://127.0.0.1:8123/hook", resolver({}))
    assert DEMO.check_url("http://[::1]:8123/hook", resolver({}))
    for url in ("https://10.0.0.8/", "http://169.254.169.254/", "http://192.168.0.10/"):
        with pytest.raises(AddressRefused):
            DEMO.check_url(url, resolver({}))


def test_the_backend_checks_the_address_it_connects_to() -> None:
    """DNS rebinding: the name was public when the webhook was made and is loopback now."""
    answers = iter([[PUBLIC], ["127.0.0.1"]])

    def rebinding(host: str, port: int) -> Sequence[str]:
        return next(answers)

    PRODUCTION.check_url("https://shop.example/hook", rebinding)
    with pytest.raises(AddressRefused, match=r"127\.0\.0\.1"):
        GuardedBackend(PRODUCTION, rebinding).connect_tcp("shop.example", 443, timeout=1)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as started:
        yield started


def test_the_backend_connects_to_the_address_it_checked(receiver: Receiver) -> None:
    backend = GuardedBackend(DEMO, resolver({"shop.test": ["127.0.0.1"]}))

    stream = backend.connect_tcp("shop.test", receiver.port, timeout=2)

    assert stream.get_extra_info("server_addr") == ("127.0.0.1", receiver.port)
    stream.close()
    with pytest.raises(AddressRefused):
        backend.connect_unix_socket("/tmp/socket")


def _attempt(
    policy: AddressPolicy, url: str, resolve: guard.Resolver = guard.resolve_host
) -> Attempt:
    """One delivery to `url` through a client guarded by `policy`."""
    endpoint = Endpoint(
        webhook_id="wh_0000000000000001", url=url, secret="s", max_per_second=1, max_in_flight=1
    )
    with guard.client(policy, timeout=2, max_connections=1, resolve=resolve) as client:
        return attempt(client, endpoint, pending_delivery(at=utcnow()))


def test_a_delivery_sends_to_the_checked_address_under_the_urls_name(receiver: Receiver) -> None:
    resolve = resolver({"shop.test": ["127.0.0.1"]})
    result = _attempt(DEMO, f"http://shop.test:{receiver.port}/hook", resolve)

    assert result.ok
    (request,) = receiver.received
    assert request.headers["host"] == f"shop.test:{receiver.port}"


def test_a_redirect_is_not_followed(receiver: Receiver) -> None:
    def redirect(request: Received, earlier: int) -> tuple[int, float]:
        return 307, 0.0

    receiver.answer = redirect
    result = _attempt(DEMO, receiver.url())

    assert (result.ok, result.status) == (False, 307)
    assert len(receiver.received) == 1


def test_a_refused_address_is_a_failed_attempt_that_never_connects(receiver: Receiver) -> None:
    resolve = resolver({"shop.example": ["127.0.0.1"]})
    result = _attempt(PRODUCTION, f"https://shop.example:{receiver.port}/", resolve)

    assert result.status is None
    assert result.error is not None
    assert result.error.startswith("refused:")
    assert receiver.connections == 0
