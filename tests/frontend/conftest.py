"""Browser tests: Playwright driving Debian's chromium (never a downloaded browser) against a
real Ember node started in this process, with its real dashboard serving the built app.

Screenshots go to ``test-artifacts/frontend/`` (git-ignored) after each test."""

from __future__ import annotations

import os
from pathlib import Path

import ember
import pytest
from browser_utils import ARTIFACTS, CHROMIUM, CHROMIUM_FLAGS

ROOT = Path(__file__).resolve().parents[2]


def _missing() -> str | None:
    """What the browser tests lack, or None when they can run."""
    if not os.path.exists(CHROMIUM):
        return f"Debian's chromium is not installed (no {CHROMIUM})"
    if not (ROOT / "frontend" / "dist" / "index.html").exists():
        return "the browser app is not built (no frontend/dist/index.html)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed"
    return None


def browser_required() -> bool:
    """In CI (``CI=true``) or with ``EMBER_REQUIRE_BROWSER=1`` a missing piece fails the tests:
    a skip there would pass a run that checked no page."""
    return (
        os.environ.get("CI", "").lower() in ("true", "1")
        or os.environ.get("EMBER_REQUIRE_BROWSER") == "1"
    )


def check_browser_setup() -> None:
    """Skips (on a developer's machine) or fails (CI) when a piece is missing, naming the fix."""
    missing = _missing()
    if missing is None:
        return
    fix = (
        "run scripts/dev.sh setup (it installs chromium, runs npm install and the build in "
        "frontend/, and pip installs playwright)"
    )
    if browser_required():
        pytest.fail(f"browser tests cannot run: {missing}; {fix}", pytrace=False)
    pytest.skip(f"{missing}; {fix}")


# Module scope, not session: Playwright's sync API keeps an event loop running on this thread
# while it is started, and later tests (outside this folder) call asyncio.run().
@pytest.fixture(scope="module")
def browser():
    check_browser_setup()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS, headless=True)
        yield b
        b.close()


@pytest.fixture(scope="module")
def cluster(_module_node_cleanup):
    """A local node (2 CPUs) with its dashboard, running the workload; yields (url, handles)."""
    import frontend_workload as workload

    if ember.is_initialized():
        ember.shutdown()
    # The Metrics page links to Grafana when the dashboard is told where it is (no server
    # needs to run there for the link).
    os.environ["EMBER_GRAFANA_HOST"] = "http://127.0.0.1:3000"
    try:
        ctx = ember.init(num_cpus=2)
    finally:
        del os.environ["EMBER_GRAFANA_HOST"]
    url = ctx.dashboard_url.rstrip("/")
    assert url, "ember.init() started no dashboard"
    handles: dict = {}
    workload.start(handles, url)
    yield url, handles
    handles.clear()


@pytest.fixture
def page(browser, cluster, request):
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    pg = context.new_page()
    pg.set_default_timeout(20_000)
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    yield pg
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try:
        pg.screenshot(path=str(ARTIFACTS / f"{request.node.name}.png"), full_page=False)
    finally:
        context.close()
    assert not errors, f"uncaught errors in the page: {errors}"
