"""Helpers for Ember's tests (imported by conftest and by test modules)."""

from __future__ import annotations

import time

import psutil
import pytest


def ember_children() -> list[psutil.Process]:
    """Ember processes descended from this test process (GCS, raylets, workers)."""
    out = []
    for p in psutil.Process().children(recursive=True):
        try:
            if "ember." in " ".join(p.cmdline()):
                out.append(p)
        except psutil.Error:
            continue
    return out


def wait_until(predicate, timeout: float = 10.0, interval: float = 0.02, message: str = ""):
    """Polls ``predicate`` until it returns a truthy value; fails the test at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {message or predicate}")
        time.sleep(interval)


def assert_no_ember_children(timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while ember_children():
        if time.monotonic() > deadline:
            left = [(p.pid, " ".join(p.cmdline())[:120]) for p in ember_children()]
            pytest.fail(f"Ember processes left behind: {left}")
        time.sleep(0.05)


def dashboard_url_in(output: str) -> str:
    """The URL on ``ember start``'s "Dashboard: ..." line (which also says when the asked-for
    port was taken and another used)."""
    import re

    m = re.search(r"^\s*Dashboard: .*?(https?://\S+)", output, re.MULTILINE)
    assert m, f"no dashboard URL in: {output!r}"
    return m.group(1).rstrip("/")
