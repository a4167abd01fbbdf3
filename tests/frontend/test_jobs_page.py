"""The Jobs page on a real cluster head: each submitted job reads its status in the list; a
running job's lines appear in its detail while it runs, then SUCCEEDED with its tasks' progress;
a failed job shows FAILED, its exit code and its error line; a running job is stopped from the
page (after a confirmation) and reads STOPPED, as the API does; Overview counts the running job
and links to the Jobs page filtered to it; an ended job is deleted from the page."""

from __future__ import annotations

import re
import shlex
import textwrap

import ember
import psutil
import pytest
from browser_utils import open_page
from ember.job_submission import JobStatus, JobSubmissionClient
from ember_test_utils import PeakRss, head_cluster, wait_until

pytestmark = pytest.mark.timeout(150)

# Prints a line a moment apart, running a task per line, then waits for the test's gate file
# (so the test sees it running for as long as it needs) and succeeds.
LINES_PROGRAM = textwrap.dedent(
    """
    import os, sys, time, ember
    ember.init()

    @ember.remote
    def step(i):
        return i * i

    for i in range(3):
        print(f"progress line {i} ->", ember.get(step.remote(i)), flush=True)
        time.sleep(0.4)
    deadline = time.time() + 60
    while not os.path.exists(sys.argv[1]):
        if time.time() > deadline:
            sys.exit("the test never opened the gate")
        time.sleep(0.1)
    print("all lines done", flush=True)
    """
)
ERROR_LINE = "ERROR: could not open input.csv"


@pytest.fixture(scope="module")
def cluster():
    """A cluster head (jobs need one) started as users start it, with 2 CPUs; the ``page``
    fixture opens its dashboard. Overrides conftest's local node. A subprocess, not
    ``Cluster``: Playwright's sync API keeps an event loop running on this thread."""
    if ember.is_initialized():
        ember.shutdown()
    with head_cluster("--num-cpus", "2", "--dashboard-port", "0") as (_root, _port, started):
        url = re.search(r"Dashboard: (http://[0-9.:]+)", started.stdout).group(1)
        yield url.rstrip("/"), None


@pytest.fixture(scope="module")
def jobs(cluster, tmp_path_factory):
    """The three jobs, submitted once: ``{"lines", "fails", "sleeps"}`` -> submission id."""
    url, _ = cluster
    client = JobSubmissionClient(url)
    gate = tmp_path_factory.mktemp("jobs") / "gate"
    program = tmp_path_factory.getbasetemp() / "lines_program.py"
    program.write_text(LINES_PROGRAM)
    ids = {
        "lines": client.submit_job(entrypoint=f"python {program} {shlex.quote(str(gate))}"),
        "fails": client.submit_job(entrypoint=f"echo {shlex.quote(ERROR_LINE)} >&2; exit 3"),
        "sleeps": client.submit_job(entrypoint="sleep 600"),
    }
    try:
        yield client, ids, gate
    finally:
        gate.touch()
        for sid in ids.values():  # a test that failed half-way leaves none running
            client.stop_job(sid)


def _read(locator) -> str | None:
    return locator.first.inner_text().strip() if locator.count() else None


def _wait_text(locator, want: str, timeout: float = 20.0, contains: bool = False) -> str:
    def ok():
        got = _read(locator)
        return got if got is not None and (want in got if contains else got == want) else None

    return wait_until(ok, timeout, 0.1, f"{want!r} (last read: {_read(locator)!r})")


def _row(page, sid: str):
    return page.locator(f"[data-testid=job-row][data-submission-id={sid}]")


def _status(client: JobSubmissionClient, sid: str, want: JobStatus, timeout: float = 30.0):
    wait_until(lambda: client.get_job_status(sid) == want, timeout, 0.2, f"{sid} to be {want}")


def test_the_list_and_each_jobs_detail(page, cluster, jobs):
    url, _ = cluster
    client, ids, gate = jobs
    open_page(page, url, "jobs")
    # Each job reads its status in the list: the lines job and the sleeper run, the other fails.
    _wait_text(_row(page, ids["lines"]).locator("[data-testid=job-status]"), "RUNNING", 30)
    _wait_text(_row(page, ids["sleeps"]).locator("[data-testid=job-status]"), "RUNNING", 30)
    _wait_text(_row(page, ids["fails"]).locator("[data-testid=job-status]"), "FAILED", 30)
    # Newest first: the sleeper was submitted last.
    assert (
        page.locator("[data-testid=job-row]").first.get_attribute("data-submission-id")
        == ids["sleeps"]
    )
    assert "sleep 600" in _row(page, ids["sleeps"]).inner_text()

    # The lines job: its lines arrive while it runs (it waits for the gate), then SUCCEEDED.
    _row(page, ids["lines"]).click()
    detail = page.locator(f"[data-testid=job-detail][data-submission-id={ids['lines']}]")
    detail.wait_for()
    assert f"sel={ids['lines']}" in page.url  # the selection is in the URL
    logs = detail.locator("[data-testid=job-logs]")
    _wait_text(logs, "progress line 2 -> 4", 30, contains=True)
    assert _read(detail.locator("[data-testid=job-detail-status]")) == "RUNNING"
    assert client.get_job_status(ids["lines"]) == JobStatus.RUNNING
    assert _read(detail.locator("[data-testid=job-logs-source]")) == "(live)"  # the tail
    assert _read(detail.locator("[data-testid=job-stop]")) == "Stop"
    assert detail.locator("[data-testid=job-stop]").is_enabled()
    assert not detail.locator("[data-testid=job-delete]").is_enabled()
    gate.touch()
    _wait_text(detail.locator("[data-testid=job-detail-status]"), "SUCCEEDED", 30)
    _wait_text(logs, "all lines done", 20, contains=True)
    text = _read(logs)
    assert [ln for ln in text.splitlines() if ln.startswith("progress line")] == [
        "progress line 0 -> 0",
        "progress line 1 -> 1",
        "progress line 2 -> 4",
    ]
    assert _read(detail.locator("[data-testid=job-message]")) == "Job finished successfully."
    assert _read(detail.locator("[data-testid=job-exit-code]")) == "0"
    assert not detail.locator("[data-testid=job-stop]").is_enabled()
    # Its driver's tasks: the progress of `step` for this job, and links filtered by its job id.
    driver = client.get_job_info(ids["lines"]).job_id
    assert driver
    _wait_text(detail.locator("[data-testid=job-driver-id]"), driver)
    step = detail.locator("[data-testid=job-task-summary] tr", has_text="step")
    _wait_text(step.locator("[data-testid=job-task-done]"), "3/3", 20)
    assert f"job={driver}" in detail.locator("[data-testid=job-tasks-link]").get_attribute("href")
    assert f"job={driver}" in detail.locator("[data-testid=job-actors-link]").get_attribute("href")

    # The failed job: FAILED, exit code 3, and the message with its error line.
    _row(page, ids["fails"]).click()
    detail = page.locator(f"[data-testid=job-detail][data-submission-id={ids['fails']}]")
    detail.wait_for()
    assert _read(detail.locator("[data-testid=job-detail-status]")) == "FAILED"
    assert _read(detail.locator("[data-testid=job-exit-code]")) == "3"
    message = _read(detail.locator("[data-testid=job-message]"))
    assert "Job entrypoint command failed with exit code 3" in message and ERROR_LINE in message
    assert _read(detail.locator("[data-testid=job-error-type]")) == "JOB_ENTRYPOINT_COMMAND_ERROR"
    _wait_text(detail.locator("[data-testid=job-logs]"), ERROR_LINE)
    assert not detail.locator("[data-testid=job-stop]").is_enabled()


def test_overview_counts_the_running_job_which_is_stopped_from_the_page(page, cluster, jobs):
    url, _ = cluster
    client, ids, gate = jobs
    gate.touch()
    _status(client, ids["lines"], JobStatus.SUCCEEDED)
    _status(client, ids["sleeps"], JobStatus.RUNNING)
    open_page(page, url, "overview")
    link = page.locator("[data-testid=running-jobs-link]")
    _wait_text(link, "1")
    link.click()
    # The Jobs page, filtered to RUNNING: the sleeper alone.
    wait_until(lambda: page.url.endswith("#/jobs?status=RUNNING"), 10, 0.1, "the Jobs page")
    row = _row(page, ids["sleeps"])
    row.wait_for()
    wait_until(lambda: page.locator("[data-testid=job-row]").count() == 1, 10, 0.1, "one row")
    row.click()
    detail = page.locator(f"[data-testid=job-detail][data-submission-id={ids['sleeps']}]")
    _wait_text(detail.locator("[data-testid=job-logs-source]"), "(live)")
    # Stop asks first: cancelling leaves it running.
    detail.locator("[data-testid=job-stop]").click()
    dialog = page.get_by_role("dialog", name="Stop this job?")
    dialog.get_by_role("button", name="Cancel").click()
    assert dialog.count() == 0 and client.get_job_status(ids["sleeps"]) == JobStatus.RUNNING
    detail.locator("[data-testid=job-stop]").click()
    page.locator("[data-testid=confirm-stop]").click()
    # The filter is RUNNING: the stopped job leaves the list, its detail stays open.
    _wait_text(detail.locator("[data-testid=job-detail-status]"), "STOPPED", 30)
    _wait_text(detail.locator("[data-testid=job-action-result]"), "Stopped.")
    assert client.get_job_status(ids["sleeps"]) == JobStatus.STOPPED
    assert _read(detail.locator("[data-testid=job-message]")) == "Job was intentionally stopped."
    wait_until(lambda: page.locator("[data-testid=job-row]").count() == 0, 10, 0.1, "no rows")
    open_page(page, url, "overview")
    _wait_text(page.locator("[data-testid=running-jobs-link]"), "0")


def test_an_ended_job_is_deleted_and_a_long_log_is_bounded(page, cluster, jobs):
    url, _ = cluster
    client, _, _ = jobs
    sid = client.submit_job(entrypoint="seq 1 6000")
    _status(client, sid, JobStatus.SUCCEEDED)
    open_page(page, url, f"jobs?sel={sid}")
    detail = page.locator(f"[data-testid=job-detail][data-submission-id={sid}]")
    # The page keeps the last 5,000 lines and says how many it left out.
    _wait_text(
        detail.locator("[data-testid=job-logs-dropped]"), "1,000 earlier lines", contains=True
    )
    lines = _read(detail.locator("[data-testid=job-logs]")).splitlines()
    assert len(lines) == 5000 and lines[0] == "1001" and lines[-1] == "6000"
    detail.locator("[data-testid=job-delete]").click()
    page.locator("[data-testid=confirm-delete]").click()
    wait_until(lambda: _row(page, sid).count() == 0, 10, 0.1, "the deleted job's row to go")
    assert "sel=" not in page.url
    assert sid not in {j.submission_id for j in client.list_jobs()}


# Waits for its gate, then writes 200 MB of numbered 100-byte lines and a last line.
BIG_LOG_LINES = 2_000_000
BIG_LOG_PROGRAM = textwrap.dedent(
    f"""
    import os, sys, time
    deadline = time.time() + 60
    while not os.path.exists(sys.argv[1]):
        if time.time() > deadline:
            sys.exit("the test never opened the gate")
        time.sleep(0.05)
    pad = "x" * 89
    for block in range(0, {BIG_LOG_LINES}, 10_000):
        sys.stdout.write("".join(f"{{i:09d}} {{pad}}\\n" for i in range(block, block + 10_000)))
    print("the last line", flush=True)
    """
)


def _listener(url: str) -> psutil.Process:
    """The process listening on the dashboard's port."""
    port = int(url.rsplit(":", 1)[1])
    pids = {
        c.pid
        for c in psutil.net_connections("tcp")
        if c.status == psutil.CONN_LISTEN and c.laddr.port == port and c.pid
    }
    assert len(pids) == 1, f"{len(pids)} processes listen on {port}"
    return psutil.Process(pids.pop())


def test_a_200_mb_log_is_followed_live_in_bounded_memory(page, cluster, jobs, tmp_path):
    """The page follows a job while it writes 200 MB: every line reaches it in order (it
    counts the ones it dropped to keep 5,000), the last line shows, and the dashboard's RSS
    grows by a few MiB, not by the log."""
    url, _ = cluster
    client, _, _ = jobs
    program, gate = tmp_path / "big_log.py", tmp_path / "gate"
    program.write_text(BIG_LOG_PROGRAM)
    sid = client.submit_job(entrypoint=f"python {program} {shlex.quote(str(gate))}")
    _status(client, sid, JobStatus.RUNNING)
    open_page(page, url, f"jobs?sel={sid}")
    detail = page.locator(f"[data-testid=job-detail][data-submission-id={sid}]")
    _wait_text(detail.locator("[data-testid=job-logs-source]"), "(live)")
    dashboard = _listener(url)
    before = dashboard.memory_info().rss
    with PeakRss(dashboard) as rss:
        gate.touch()
        _wait_text(detail.locator("[data-testid=job-logs-source]"), "(ended)", 120)
    _status(client, sid, JobStatus.SUCCEEDED)
    lines = _read(detail.locator("[data-testid=job-logs]")).splitlines()
    assert len(lines) == 5000 and lines[-1] == "the last line"
    assert lines[0].startswith(f"{BIG_LOG_LINES - 4999:09d} ") and len(lines[0]) == 99
    # Every line came, none twice: the dropped ones and the kept ones make the whole log.
    _wait_text(
        detail.locator("[data-testid=job-logs-dropped]"),
        f"{BIG_LOG_LINES + 1 - 5000:,} earlier lines",
        contains=True,
    )
    # Still the followed end once the status poll says SUCCEEDED (not refetched).
    wait_until(
        lambda: _read(_row(page, sid).locator("[data-testid=job-status]")) == "SUCCEEDED",
        10,
        0.1,
        "the row to read SUCCEEDED",
    )
    assert _read(detail.locator("[data-testid=job-logs-source]")) == "(ended)"
    grew = (rss.peak - before) / 2**20
    print(f"dashboard RSS {before / 2**20:.1f} MiB, peak +{grew:.1f} MiB while following 200 MB")
    assert grew < 20, f"the dashboard grew by {grew:.1f} MiB following the log"


def test_a_long_logs_page_starts_at_its_end(page, cluster, jobs):
    """A running job that has already written ~4 MB: the page asks the tail for the end
    (``last_bytes``) and says what it left out, instead of streaming the whole log."""
    url, _ = cluster
    client, _, _ = jobs
    sid = client.submit_job(entrypoint="seq 1 600000; sleep 600")
    wait_until(
        lambda: "600000" in client.get_job_logs(sid)[-8:], 30, 0.2, "the job's 600,000 lines"
    )
    try:
        open_page(page, url, f"jobs?sel={sid}")
        detail = page.locator(f"[data-testid=job-detail][data-submission-id={sid}]")
        _wait_text(detail.locator("[data-testid=job-logs-source]"), "(live)")
        logs = detail.locator("[data-testid=job-logs]")
        wait_until(lambda: (_read(logs) or "").endswith("\n600000"), 20, 0.1, "the last line")
        lines = _read(logs).splitlines()
        assert len(lines) == 5000 and lines[-1] == "600000" and lines[0] == "595001"
        # What the tail left out (the page asked for the last MiB) and what the page dropped
        # of the rest add up to the lines before its first.
        dropped = int(
            re.search(
                r"([\d,]+) earlier lines", _read(detail.locator("[data-testid=job-logs-dropped]"))
            )
            .group(1)
            .replace(",", "")
        )
        assert dropped < 600000 - 5000  # it did not stream the whole log
    finally:
        client.stop_job(sid)


def test_a_job_whose_node_dies_reads_failed_with_the_reason(page):
    """A second machine's node (``ember start --address``) runs the job; its processes are
    killed: the page shows the job FAILED, naming that node and its death."""
    import json
    import shutil
    import subprocess
    import tempfile

    from ember_test_utils import ember_cli

    with head_cluster("--num-cpus", "1", "--dashboard-port", "0") as (_root, port, started):
        url = re.search(r"Dashboard: (http://[0-9.:]+)", started.stdout).group(1).rstrip("/")
        worker_root = tempfile.mkdtemp(prefix="emb-w-", dir="/tmp")
        stop = [ember_cli(), "stop", "--force", "--temp-dir", worker_root]
        try:
            joined = subprocess.run(
                [
                    ember_cli(),
                    "start",
                    "--address",
                    f"127.0.0.1:{port}",
                    "--temp-dir",
                    worker_root,
                    "--num-cpus",
                    "1",
                    "--resources",
                    json.dumps({"only_there": 1}),
                    "--object-store-memory",
                    str(64 * 2**20),
                    "--node-ip-address",
                    "127.0.0.1",
                ],
                capture_output=True,
                text=True,
                timeout=90,
            )
            assert joined.returncode == 0, joined.stderr
            client = JobSubmissionClient(url)
            sid = client.submit_job(entrypoint="sleep 600", entrypoint_resources={"only_there": 1})
            _status(client, sid, JobStatus.RUNNING, 60)
            node_id = client.get_job_info(sid).driver_node_id
            subprocess.run(stop, capture_output=True, timeout=90)  # the node dies
            open_page(page, url, f"jobs?sel={sid}")
            detail = page.locator(f"[data-testid=job-detail][data-submission-id={sid}]")
            _wait_text(detail.locator("[data-testid=job-detail-status]"), "FAILED", 60)
            message = _read(detail.locator("[data-testid=job-message]")) or ""
            assert f"node {node_id}" in message and "died" in message, message
            _wait_text(_row(page, sid).locator("[data-testid=job-status]"), "FAILED")
            # Its log was on the dead node: the page says so rather than "No output yet".
            error = detail.locator(".error", has_text="does not answer")
            wait_until(lambda: error.count() > 0, 30, 0.2, "the log's unavailability")
            assert node_id in error.first.inner_text()
        finally:
            subprocess.run(stop, capture_output=True, timeout=90)
            shutil.rmtree(worker_root, ignore_errors=True)


def test_a_jobs_long_lines_wrap_and_its_whole_log_downloads(page, cluster):
    """A line wider than the page wraps in the job's log (it was cut at the edge), and the
    Download link serves the whole file, however much the page keeps."""
    url, _ = cluster
    client = JobSubmissionClient(url)
    long_line = "wide-" + "x" * 3000
    program = f"print({long_line!r}); print('the end')"
    sid = client.submit_job(entrypoint=f"python -c {shlex.quote(program)}")
    try:
        _status(client, sid, JobStatus.SUCCEEDED)
        open_page(page, url, f"jobs?sel={sid}")
        detail = page.locator(f"[data-testid=job-detail][data-submission-id={sid}]")
        logs = detail.locator("[data-testid=job-logs]")
        _wait_text(logs, "the end", 30, contains=True)
        assert logs.evaluate("e => e.scrollWidth <= e.clientWidth + 1")  # no sideways scroll
        assert long_line in _read(logs).replace("\n", "")
        # The download serves files the node's agent has listed (a new one within a moment).
        rec = client.get_job_info(sid)
        listed = f"{url}/api/logs?filter=node_id={rec.driver_node_id}&limit=1000"
        wait_until(
            lambda: any(
                f["name"] == rec.log_name for f in page.request.get(listed).json()["items"]
            ),
            30,
            0.3,
            "the job's log listed",
        )
        with page.expect_download() as download:
            detail.locator("[data-testid=job-log-download]").click()
        with open(download.value.path(), encoding="utf-8") as f:
            assert f.read().splitlines() == [long_line, "the end"]
    finally:
        client.delete_job(sid)
