"""Browser tests: Playwright driving Debian's chromium (never a downloaded browser) against a
real Ember node started in this process, with its real dashboard serving the built app.

Screenshots go to ``test-artifacts/frontend/`` (git-ignored) after each test."""

from __future__ import annotations

import os
from pathlib import Path

import ember
import pytest
from browser_utils import CHROMIUM, CHROMIUM_FLAGS

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "frontend"


def _why_skip() -> str | None:
    if not os.path.exists(CHROMIUM):
        return "Debian's chromium is not installed (scripts/dev.sh setup installs it)"
    if not (ROOT / "frontend" / "dist" / "index.html").exists():
        return "the browser app is not built (scripts/dev.sh setup runs npm ci and the build)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[test]')"
    return None


# Module scope, not session: Playwright's sync API keeps an event loop running on this thread
# while it is started, and later tests (outside this folder) call asyncio.run().
@pytest.fixture(scope="module")
def browser():
    why = _why_skip()
    if why:
        pytest.skip(why)
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
    workload.start(handles)
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
