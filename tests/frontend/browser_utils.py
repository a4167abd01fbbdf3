"""Helpers for the browser tests (imported by the test modules)."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# Screenshots, git-ignored. Here rather than in conftest.py: a test module importing
# ``conftest`` gets whichever directory's conftest was imported first (tests/cluster has one).
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "frontend"

# Debian's chromium, never a browser Playwright downloads; the flags keep it off the network.
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def open_page(pg, url: str, route: str) -> None:
    """Loads the app at ``#/route`` and waits until its live stream is connected."""
    pg.goto(f"{url}/#/{route}")
    pg.wait_for_selector("[data-testid=stream-status][data-status=open]")


def text(pg, selector: str) -> str:
    return pg.locator(selector).first.inner_text()


def total(pg, table: str) -> int:
    """The row count a virtualised table reports (its server-side total)."""
    return int(pg.locator(f"[data-testid={table}]").get_attribute("data-total") or -1)


def wait_total(pg, table: str, op: str, n: int, timeout: float = 20_000) -> None:
    """Waits until the table's server-side total satisfies ``total <op> n`` (``==``, ``>=``)."""
    pg.wait_for_function(
        f"Number(document.querySelector('[data-testid={table}]')?.dataset.total) {op} {n}",
        timeout=timeout,
    )


def wait_chart_points(pg, testid: str, n: int, timeout: float = 20_000) -> None:
    """Waits until the chart holds at least ``n`` data points (its ``data-points``)."""
    pg.wait_for_function(
        f"Number(document.querySelector('[data-testid={testid}]')?.dataset.points) >= {n}",
        timeout=timeout,
    )


@contextlib.contextmanager
def checked_page(browser: Any) -> Iterator[Any]:
    """A page in a fresh context (1400x900, 20 s default timeout) for tests that open their
    own (the ``page`` fixture is the module cluster's); fails on any uncaught page error."""
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    page.set_default_timeout(20_000)
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        yield page
    finally:
        context.close()
    assert not errors, f"uncaught errors in the page: {errors}"
