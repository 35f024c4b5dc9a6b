"""Browser tests: Debian's Chromium driven by Playwright against the example landing page, with
shoppers signed in by the real Firebase Auth emulator and claims served by claim_api over HTTP
(functions-framework) on the suite's emulators. A missing browser fails the run, with the fix."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

import pytest
import requests

from devkit.browser import CHROMIUM_HINT, find_chromium
from devkit.emulators import EmulatorStack, RunningEmulator, free_port
from devkit.emulators.auth import AuthEmulatorClient
from devkit.standins.app_check import DevAppCheckServer
from scripts.localstack.pages import PageConfig, PageServer, PagesUnavailable
from tests.support.servers import function_servers
from tests.support.stack import CORS_ORIGIN, PROJECT

if TYPE_CHECKING:
    from playwright.sync_api import Browser, BrowserContext, Page, Request, Route, ViewportSize

PLAYWRIGHT_HINT = "Install Playwright for Python: `pip install -r requirements-dev.txt`."
PHONE: ViewportSize = {"width": 390, "height": 844}
LOCAL_HOSTS = {"127.0.0.1", "localhost"}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "browser: drives Chromium against the landing page")


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    chromium = find_chromium()
    if chromium is None:
        pytest.fail(f"browser tests cannot run here: no Chromium found. {CHROMIUM_HINT}", False)
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail(f"browser tests cannot run here: {PLAYWRIGHT_HINT}", pytrace=False)
    with sync_playwright() as playwright:
        # Playwright passes --no-sandbox itself (Chromium's sandbox refuses to run as root).
        launched = playwright.chromium.launch(executable_path=str(chromium))
        yield launched
        launched.close()


class ClaimsOverHttp(Protocol):
    """A stack serving claim_api over HTTP to shoppers of the Auth emulator."""

    @property
    def claim_api(self) -> str: ...

    @property
    def auth(self) -> AuthEmulatorClient: ...


def claim_over_http(stack: ClaimsOverHttp, campaign_id: str) -> requests.Response:
    """Another shopper, signed in anonymously on the Auth emulator, claims without a browser."""
    user = stack.auth.sign_up_anonymous()
    return requests.post(
        f"{stack.claim_api}/v1/campaigns/{campaign_id}/claims",
        headers={"Authorization": f"Bearer {user.id_token}"},
        timeout=30,
    )


@dataclass(frozen=True)
class WebStack:
    page_url: str
    claim_api: str
    auth: AuthEmulatorClient


@pytest.fixture(scope="session")
def web_stack(
    emulators: EmulatorStack,
    auth_emulator: RunningEmulator,
    auth_users: AuthEmulatorClient,
    app_check_keys: DevAppCheckServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[WebStack]:
    """claim_api over HTTP (its CORS allowing the page's origin, its App Check keys the run's
    development key set) and the page server, which fetches App Check tokens from that set."""
    page_port = free_port()
    page_origin = f"http://127.0.0.1:{page_port}"
    with contextlib.ExitStack() as stack:
        with pytest.MonkeyPatch.context() as mp:  # the servers' environment only
            mp.setenv("CODEDROP_CORS_ORIGINS", f"{CORS_ORIGIN},{page_origin}")
            mp.setenv("FIREBASE_AUTH_EMULATOR_HOST", auth_emulator.host_port)
            run_dir = tmp_path_factory.mktemp("browser-functions")
            urls = stack.enter_context(function_servers(["claim_api"], run_dir=run_dir))
        config = PageConfig(
            api_base=urls["claim_api"],
            project=PROJECT,
            auth_emulator_url=f"http://{auth_emulator.host_port}",
            app_check_token_url=f"{app_check_keys.url}/token",
        )
        try:
            pages = stack.enter_context(PageServer(host="127.0.0.1", port=page_port, config=config))
        except PagesUnavailable as exc:
            pytest.fail(f"browser tests cannot run here: {exc}", pytrace=False)
        yield WebStack(page_url=pages.url, claim_api=urls["claim_api"], auth=auth_users)


@dataclass
class Shopper:
    """One shopper's browser (a context of its own: its own Firebase session) on a phone-sized
    screen, with every request it sent."""

    context: BrowserContext
    page: Page
    stack: WebStack
    requests: list[Request] = field(default_factory=list)
    external: list[str] = field(default_factory=list)
    console_errors: list[str] = field(default_factory=list)

    def open(self, campaign_id: str) -> Page:
        self.page.goto(f"{self.stack.page_url}/?campaign={campaign_id}")
        return self.page

    def claim(self, campaign_id: str) -> tuple[Page, str]:
        """Opens the campaign's page, claims, and waits for the code the page then shows: the
        page and that code."""
        from playwright.sync_api import expect

        page = self.open(campaign_id)
        page.get_by_test_id("claim-button").click()
        code = page.get_by_test_id("code")
        expect(code).to_have_text(re.compile(campaign_id))
        return page, code.inner_text()

    def claims_sent(self) -> list[Request]:
        return [r for r in self.requests if r.method == "POST" and r.url.endswith("/claims")]

    def sent(self, pattern: str) -> list[Request]:
        return [r for r in self.requests if re.search(pattern, r.url)]

    def status(self) -> str:
        return str(self.page.locator("main").get_attribute("data-status"))


@contextlib.contextmanager
def open_shopper(browser: Browser, web_stack: WebStack) -> Iterator[Shopper]:
    """A new shopper's browser; on leaving, it must not have reached outside 127.0.0.1."""
    context = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    page = context.new_page()
    who = Shopper(context=context, page=page, stack=web_stack)

    def only_local(route: Route, request: Request) -> None:
        # The page must work offline: nothing may leave 127.0.0.1.
        if urlsplit(request.url).hostname in LOCAL_HOSTS:
            route.continue_()
        else:
            who.external.append(request.url)
            route.abort()

    def console(message: Any) -> None:
        if message.type == "error":
            where = message.location.get("url")
            who.console_errors.append(f"{message.text} ({where})" if where else message.text)

    context.route("**/*", only_local)
    context.on("request", lambda request: who.requests.append(request))
    page.on("console", console)
    page.set_default_timeout(20_000)
    yield who
    context.close()
    assert who.external == [], f"the page reached outside 127.0.0.1: {who.external}"


@pytest.fixture
def shopper(browser: Browser, web_stack: WebStack) -> Iterator[Shopper]:
    with open_shopper(browser, web_stack) as who:
        yield who


@pytest.fixture
def second_shopper(browser: Browser, web_stack: WebStack) -> Iterator[Shopper]:
    """Another person's browser (or the same person's, signed in afresh)."""
    with open_shopper(browser, web_stack) as who:
        yield who
