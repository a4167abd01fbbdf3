"""The browser app on ``ember dashboard --history``: two stopped sessions under one temp root,
written by the history writer as a dashboard would; the index lists both, a session's page
shows the history banner (its name and when it stopped) and its failed task with the
traceback, a job the cluster stopped under says so, and the server stops cleanly."""

from __future__ import annotations

import time

import httpx
from browser_utils import ARTIFACTS, checked_page
from ember.dashboard import job_records as jr
from ember.dashboard.history_writer import HistoryWriter
from ember_test_utils import history_server, write_history_session


def test_history_pages_in_the_browser(browser, tmp_path):
    t0 = time.time() - 3600
    write_history_session(str(tmp_path), "session_2026-01-01_00-00-00_1", t0 - 86_400)
    newest = "session_2026-01-02_00-00-00_2"
    session = write_history_session(str(tmp_path), newest, t0)
    # A job the cluster stopped under: its last record says RUNNING.
    job = jr.new_record("raysubmit_stopped", "python long.py", None, None, {})
    w = HistoryWriter(session, flush_s=60)
    w.record("job", {"record": dict(job, status=jr.RUNNING, message=jr.MSG_RUNNING)})
    w.close()
    with history_server(str(tmp_path)) as (url, line):
        assert "2 session(s)" in line, line
        url = url.rstrip("/")
        listed = httpx.get(f"{url}/api/sessions", timeout=30).json()
        assert [s["session_name"] for s in listed["sessions"]][-1] == newest
        with checked_page(browser) as page:
            page.goto(f"{url}/")
            page.click(f"text={newest}")
            banner = page.get_by_test_id("history-banner")
            banner.wait_for()
            assert f"History of session {newest}, stopped at" in banner.inner_text()
            assert page.get_by_test_id("stream-status").get_attribute("data-status") == "history"
            page.goto(f"{url}/sessions/{newest}/#/tasks")
            page.get_by_text("boom", exact=True).first.wait_for()
            assert page.get_by_text("FAILED").first.is_visible()
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "history_tasks.png"))
            page.goto(f"{url}/sessions/{newest}/#/jobs?sel=raysubmit_stopped")
            message = page.get_by_test_id("job-message")
            message.wait_for()
            assert message.inner_text().startswith(
                f"The cluster stopped while this job was RUNNING (session {newest} stopped at "
            ), message.inner_text()
            assert page.get_by_test_id("job-detail-status").inner_text() == "RUNNING"
