"""``ember archive`` and the history server over archives: a real two-node cluster (``ember
start``) runs a job with a failed task and a task on the other node, and a job that is still
running when ``ember stop`` stops the cluster; the archive is made (once while it runs, once
after), the session directory removed, and ``ember dashboard --history FILE.tar.gz`` must
serve all of it. Plus refused archives, bad input, more sessions than are kept in memory,
and what the history says of a job the cluster stopped under."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import warnings

import httpx
import pytest
from ember.dashboard.history_archive import ArchiveError, Budget, extract
from ember_test_utils import (
    HISTORY_NODE,
    api_get,
    dashboard_url_in,
    ember_cli,
    failed_task,
    head_cluster,
    history_server,
    wait_until,
    write_history_session,
)

JOB = """
import ember

ember.init()

@ember.remote(resources={"far": 1})
def shout():
    print("FAR-NODE-MARK", flush=True)
    return ember.get_runtime_context().get_node_id()

@ember.remote
def boom():
    raise ValueError("archive-boom-7")

print("FAR-NODE", ember.get(shout.remote(), timeout=60), flush=True)
try:
    ember.get(boom.remote())
except Exception as e:
    print("caught", type(e).__name__, flush=True)
print("LOG-END", flush=True)
"""
SLEEPER = """
import time
import ember
ember.init()

@ember.remote(num_cpus=0)
def nap():
    time.sleep(300)

ref = nap.remote()
print("STILL-RUNNING", flush=True)
ember.get(ref)
"""


def _run(*args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    return subprocess.run([ember_cli(), *args], capture_output=True, text=True, timeout=timeout)


def _submit(http: httpx.Client, root: str, name: str, code: str) -> str:
    script = os.path.join(root, name)
    with open(script, "w") as f:
        f.write(code)
    r = http.post("/api/jobs/", json={"entrypoint": f"{sys.executable} {script}"})
    assert r.status_code == 200, r.text
    return r.json()["submission_id"]


def test_archive_of_a_cluster_served_after_its_session_is_gone():
    with head_cluster(prefix="emb-arch-") as (root, port, head):
        join = [ember_cli(), "start", "--address", f"127.0.0.1:{port}", "--num-cpus", "1"]
        join += ["--node-ip-address", "127.0.0.1", "--temp-dir", root, "--resources", '{"far": 1}']
        join += ["--object-store-memory", str(64 * 2**20)]
        r = subprocess.run(join, capture_output=True, text=True, timeout=90)
        assert r.returncode == 0, r.stderr
        live = httpx.Client(base_url=dashboard_url_in(head.stdout), timeout=30)
        head_session = api_get(live, "/api/version")["session_dir"]
        done = _submit(live, root, "job.py", JOB)
        running = _submit(live, root, "sleeper.py", SLEEPER)

        def ended():
            job = api_get(live, f"/api/jobs/{done}")
            return job if job["status"] in ("SUCCEEDED", "FAILED", "STOPPED") else None

        job = wait_until(ended, 120, 0.3, "the job to end")
        assert job["status"] == "SUCCEEDED", (job, api_get(live, f"/api/jobs/{done}/logs"))
        far_node = next(
            line.split()[1]
            for line in api_get(live, f"/api/jobs/{done}/logs")["logs"].splitlines()
            if line.startswith("FAR-NODE ")
        )
        assert far_node != api_get(live, "/api/version").get("node_id")
        wait_until(lambda: failed_task(live, "boom"), 30, 0.3, "the failed task on the dashboard")
        wait_until(
            lambda: "STILL-RUNNING" in api_get(live, f"/api/jobs/{running}/logs")["logs"],
            60,
            0.3,
            "the second job to run",
        )
        wait_until(lambda: _task(live, "nap", "RUNNING"), 60, 0.3, "the second job's task to run")
        shipped = os.path.join(head_session, "node_logs", far_node)
        far_log = wait_until(
            lambda: next(
                (
                    n
                    for n in (os.listdir(shipped) if os.path.isdir(shipped) else [])
                    if n.endswith(".out")
                    and "FAR-NODE-MARK" in open(os.path.join(shipped, n)).read()
                ),
                None,
            ),
            30,
            0.3,
            "the far node's worker log to reach the head",
        )
        live.close()

        # While it runs: the newest live head's session, packed as it is, saying so.
        snap = os.path.join(root, "running.tar.gz")
        r = _run("archive", "--temp-dir", root, "-o", snap)
        assert r.returncode == 0, r.stderr
        assert "the cluster is running" in r.stderr and head_session in r.stderr, r.stderr
        with tarfile.open(snap) as tar:
            manifest = json.load(
                tar.extractfile(tar.getmember(_member(head_session, "ember-archive.json")))
            )
        assert manifest["running"] is True and manifest["session_dir"] == head_session
        # The same by the cluster's address, as the other commands take it.
        by_address = os.path.join(root, "by-address.tar.gz")
        r = _run("archive", "--address", f"127.0.0.1:{port}", "-o", by_address)
        assert r.returncode == 0 and f"session: {head_session}" in r.stderr, r.stderr
        assert r.stdout.rstrip().endswith(f"into {by_address}"), r.stdout

        stop = _run("stop", "--temp-dir", root)
        assert stop.returncode == 0, stop.stderr
        out = os.path.join(root, "after.tar.gz")
        r = _run("archive", head_session, "-o", out)
        assert r.returncode == 0, r.stderr
        assert "the cluster is running" not in r.stderr
        files = int(r.stdout.split("packed ", 1)[1].split()[0])
        assert r.stdout.rstrip().endswith(f"into {out}"), r.stdout
        with tarfile.open(out) as tar:
            names = tar.getnames()
        assert len(names) == files + 1  # and the manifest
        rel = {n.split("/", 1)[1] for n in names}
        assert f"node_logs/{far_node}/{far_log}" in rel
        assert {"gcs_storage.sqlite3", "logs/raylet.log", "ember-archive.json"} <= rel
        assert any(n.startswith("history/journal-") for n in rel)
        # Never sockets, tokens, spill files, the node's pid list.
        assert not [n for n in rel if n.startswith(("sockets", "ember-spill-"))]
        assert not rel & {"cluster_token", "dashboard_token", "node.json"}
        # The archive alone: the session directory is gone.
        shutil.rmtree(head_session)
        with history_server(out) as (url, _):
            unpacked = _check_archive(url, done, running, far_node, far_log)
        assert not os.path.exists(unpacked), "the extracted archive outlived the server"


def _task(http: httpx.Client, name: str, state: str) -> dict | None:
    rows = api_get(http, "/api/tasks", filter=f"state={state}")["items"]
    return next((t for t in rows if t.get("name", "").endswith(name)), None)


def _member(session_dir: str, rel: str) -> str:
    return f"{os.path.basename(session_dir)}/{rel}"


def _check_archive(url: str, done: str, running: str, far_node: str, far_log: str) -> str:
    http = httpx.Client(base_url=url, timeout=60)
    version = api_get(http, "/api/version")
    assert version["history"] is True
    assert version["history_session"]["archive"]["running"] is False
    # The job that ended: its status and its log.
    assert api_get(http, f"/api/jobs/{done}")["status"] == "SUCCEEDED"
    logs = api_get(http, f"/api/jobs/{done}/logs")["logs"]
    assert "caught RayTaskError" in logs or "caught" in logs, logs
    # The driver's last line is there; a worker's forwarded print may land after it (as on
    # Ray, a worker's output reaches the driver on its own path, not in order with results).
    assert "LOG-END" in logs.splitlines(), logs
    # The job that was running when the cluster stopped: its last status, saying why.
    job = api_get(http, f"/api/jobs/{running}")
    assert job["status"] == "RUNNING", job
    assert job["message"].startswith("The cluster stopped while this job was RUNNING"), job
    assert "did not fail by itself" in job["message"]
    assert job["end_time"] == int(version["stopped_at"] * 1000)
    listed = {j["submission_id"]: j for j in api_get(http, "/api/jobs/")}
    assert listed[running]["message"] == job["message"]
    assert "STILL-RUNNING" in api_get(http, f"/api/jobs/{running}/logs")["logs"]
    # Its task, running when the cluster stopped: ended there, saying so, not RUNNING forever.
    assert _task(http, "nap", "RUNNING") is None
    nap = api_get(http, f"/api/tasks/{_task(http, 'nap', 'FAILED')['task_id']}")
    assert nap["error"].startswith("No end of this task was recorded: the cluster stopped"), nap
    # The failed task's traceback.
    task = failed_task(http, "boom")
    assert task is not None
    assert "archive-boom-7" in task["error"] and "Traceback" in task["error"], task["error"]
    # The other node's log, shipped to the head; the head's own.
    tail = api_get(http, "/api/logs/tail", node_id=far_node, name=far_log)
    assert any("FAR-NODE-MARK" in line for line in tail["lines"]), tail
    files = api_get(http, "/api/logs", limit=1000)["items"]
    raylet = next(f for f in files if f["name"] == "raylet.log" and f["node_id"] != far_node)
    assert api_get(http, "/api/logs/tail", node_id=raylet["node_id"], name="raylet.log")["lines"]
    # Read-only as any history.
    r = http.post(f"/api/jobs/{running}/stop")
    assert r.status_code == 405 and "history" in r.json()["detail"]
    http.close()
    return version["session_dir"]


# -- refused archives ------------------------------------------------------------------------
def _tar(path: str, members: list[tuple[tarfile.TarInfo, bytes]]) -> str:
    with tarfile.open(path, "w:gz") as tar:
        for info, data in members:
            info.size = len(data) if info.isreg() else 0
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return path


def _info(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return info


S = "session_2026-01-01_00-00-00_000000_1"
BAD = {
    "absolute": (_info("/etc/ember-evil"), "has an absolute path"),
    "dotdot": (_info(f"{S}/../../evil"), "has '..' in its path"),
    "symlink": (_info(f"{S}/logs/x", tarfile.SYMTYPE, "/etc/passwd"), "is a link"),
    "hardlink": (_info(f"{S}/logs/y", tarfile.LNKTYPE, "/etc/passwd"), "is a link"),
    "device": (_info(f"{S}/logs/dev", tarfile.CHRTYPE), "is a device or pipe"),
    "fifo": (_info(f"{S}/logs/pipe", tarfile.FIFOTYPE), "is a device or pipe"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_unsafe_members_are_refused_naming_them(tmp_path, case):
    info, why = BAD[case]
    good = _info(f"{S}/logs/raylet.log")
    archive = _tar(str(tmp_path / "bad.tar.gz"), [(good, b"ok\n"), (info, b"x")])
    dest = tmp_path / "out"
    dest.mkdir()
    with pytest.raises(ArchiveError) as e:
        extract(archive, str(dest), Budget())
    assert f"member {info.name!r} {why}" in str(e.value) and archive in str(e.value)
    # Nothing was written outside the destination.
    assert not os.path.lexists("/etc/ember-evil") and not (tmp_path / "evil").exists()


def test_extraction_is_bounded_whatever_the_headers_say(tmp_path, monkeypatch):
    big = _info(f"{S}/logs/big.log")
    archive = _tar(str(tmp_path / "big.tar.gz"), [(big, b"\0" * (3 << 20))])  # 3 MB, ~3 KB gz
    monkeypatch.setenv("EMBER_HISTORY_ARCHIVE_MAX_BYTES", str(1 << 20))
    dest = tmp_path / "out"
    dest.mkdir()
    with pytest.raises(ArchiveError) as e:
        extract(archive, str(dest), Budget())
    assert "more than 1048576 bytes" in str(e.value)
    assert "EMBER_HISTORY_ARCHIVE_MAX_BYTES" in str(e.value)


def test_the_cli_refuses_a_bad_archive_and_cleans_up(tmp_path):
    archive = _tar(str(tmp_path / "bad.tar.gz"), [(BAD["dotdot"][0], b"x")])
    before = set(os.listdir("/tmp"))
    r = _run("dashboard", "--history", archive, "--port", "0", timeout=60)
    assert r.returncode != 0
    assert f"refusing {archive}: member '{S}/../../evil' has '..' in its path" in r.stderr
    left = {n for n in set(os.listdir("/tmp")) - before if n.startswith("ember-history-")}
    assert not left, left


def test_archive_bad_input_exits_2(tmp_path):
    session = write_history_session(str(tmp_path), "session_x_1", time.time())
    out = str(tmp_path / "a.tar.gz")
    for args, expected in [
        (["/nonexistent-session"], "/nonexistent-session is not a directory"),
        ([str(tmp_path)], f"{tmp_path} is not an Ember session directory"),
    ]:
        r = _run("archive", *args, "-o", out, timeout=60)
        assert r.returncode == 2, (args, r.stderr)
        assert expected in r.stderr, r.stderr
    assert _run("archive", session, "-o", out, timeout=60).returncode == 0
    r = _run("archive", session, "-o", out, timeout=60)
    assert r.returncode == 2 and f"{out} exists" in r.stderr, r.stderr


# -- the history server's sessions and jobs ---------------------------------------------------
@contextlib.contextmanager
def _client(app):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient
    with TestClient(app) as c:
        yield c


def test_more_sessions_than_kept_in_memory(tmp_path):
    """Six sessions, four kept loaded: each still opens (the least recently used replayed
    again), and each answers with its own data."""
    from ember.dashboard.history_server import HistoryServer, open_path

    t0 = time.time() - 3600
    names = [f"session_{i}_{i}" for i in range(6)]
    for i, name in enumerate(names):
        write_history_session(str(tmp_path), name, t0 + 60 * i)
    server = HistoryServer(open_path(str(tmp_path), str(tmp_path / "unused")), max_loaded=4)
    with _client(server) as c:
        for rounds in range(2):
            for i, name in enumerate(names):
                samples = c.get(
                    f"/sessions/{name}/api/history", params={"node_id": HISTORY_NODE}
                ).json()["samples"]
                assert [s["time"] for s in samples] == [t0 + 60 * i + 2 * k for k in range(3)]
                loaded = [
                    s["session_name"]
                    for s in c.get("/api/sessions").json()["sessions"]
                    if s["loaded"]
                ]
                assert len(loaded) == min(4, i + 1 if rounds == 0 else 4), loaded
                assert name in loaded
        # The least recently used went first: after the second round, the last four.
        assert list(server.apps) == names[2:]


def test_a_job_the_cluster_stopped_under(tmp_path):
    """A submitted job whose last record says RUNNING keeps that status in the history, with
    a message that the cluster stopped while it ran, and an end at the stop."""
    from ember.dashboard.history_server import HistoryServer
    from ember.dashboard.history_writer import HistoryWriter

    session = tmp_path / "session_j_1"
    (session / "logs").mkdir(parents=True)
    w = HistoryWriter(str(session), flush_s=60)
    rec = {
        "submission_id": "raysubmit_x",
        "status": "RUNNING",
        "message": "Job is running.",
        "start_time": int(time.time() * 1000) - 5000,
        "end_time": None,
        "entrypoint": "x",
    }
    w.record("job", {"record": rec})
    w.record("job", {"record": dict(rec, submission_id="raysubmit_y", status="SUCCEEDED")})
    w.close()
    with _client(HistoryServer([str(session)])) as c:
        stopped = c.get("/api/version").json()["stopped_at"]
        job = c.get("/api/jobs/raysubmit_x").json()
        assert job["status"] == "RUNNING"
        assert job["message"].startswith(
            "The cluster stopped while this job was RUNNING (session session_j_1 stopped at "
        )
        assert job["end_time"] == int(stopped * 1000)
        done = c.get("/api/jobs/raysubmit_y").json()
        assert done["status"] == "SUCCEEDED" and done["message"] == "Job is running."


def test_pack_takes_only_the_allowlist_and_follows_no_link(tmp_path):
    """What ``pack`` leaves out (sockets, tokens, spill files, node.json, links to inside
    or outside, a writer's .tmp) and the open journal segment cut at its last whole record,
    as a running session's is."""
    from ember.dashboard.history_archive import pack
    from ember.dashboard.history_format import encode, records

    session = tmp_path / "session_p_1"
    for d in ("logs", "history", "node_logs/" + "ef" * 16, "sockets", "ember-spill-00"):
        (session / d).mkdir(parents=True)
    (session / "logs" / "raylet.log").write_text("raylet line\n")
    (session / "node_logs" / ("ef" * 16) / "worker-1.out").write_text("far\n")
    for name in (
        "cluster_token",
        "node.json",
        "ember-spill-00/x.spill",
        "history/dropped.json.tmp",
    ):
        (session / name).write_text("secret")
    os.symlink("/etc/passwd", session / "logs" / "outside.log")
    os.symlink(session / "logs" / "raylet.log", session / "logs" / "inside.log")
    os.symlink(session / "sockets", session / "node_logs" / "linked-dir")
    whole = encode(1.0, "agent", {"n": 1}) + encode(2.0, "agent", {"n": 2})
    (session / "history" / "journal-000001.records").write_bytes(whole + encode(3.0, "x", {})[:7])
    packed = pack(str(session), str(tmp_path / "p.tar.gz"), running=True)
    with tarfile.open(packed.path) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames()}
        segment = tar.extractfile("session_p_1/history/journal-000001.records").read()
        manifest = json.load(tar.extractfile("session_p_1/ember-archive.json"))
    assert names == {
        "logs/raylet.log",
        f"node_logs/{'ef' * 16}/worker-1.out",
        "history/journal-000001.records",
        "ember-archive.json",
    }
    assert segment == whole
    assert (packed.files, packed.bytes) == (3, len("raylet line\n") + len("far\n") + len(whole))
    skipped = sorted(s.split(":")[0] for s in packed.skipped)
    assert skipped == ["logs/inside.log", "logs/outside.log", "node_logs/linked-dir"]
    assert manifest["running"] is True and manifest["skipped"] == packed.skipped
    p = tmp_path / "seg"
    p.write_bytes(segment)
    assert [r[2] for r in records(str(p))] == [{"n": 1}, {"n": 2}]


def test_a_session_and_its_archive_side_by_side(tmp_path):
    """A directory holding a session and an archive of it serves both, told apart; a dead
    server's extracted archives are removed by the next one."""
    from ember.dashboard.history_archive import pack
    from ember.dashboard.history_server import (
        UNPACK_PREFIX,
        HistoryServer,
        _remove_stale_unpack_dirs,
        open_path,
    )

    session = write_history_session(str(tmp_path), "session_s_1", time.time() - 60)
    pack(session, str(tmp_path / "s.tar.gz"), running=False)
    unpack = tmp_path / "unpack"
    unpack.mkdir()
    dirs = open_path(str(tmp_path), str(unpack))
    assert dirs[0] == session and dirs[1].startswith(str(unpack))
    with _client(HistoryServer(dirs)) as c:
        listed = [s["session_name"] for s in c.get("/api/sessions").json()["sessions"]]
        assert listed == ["session_s_1", "session_s_1~2"]
        v = c.get("/sessions/session_s_1~2/api/version").json()
        assert v["history_session"]["archive"]["session_dir"] == session
        assert (
            c.get("/sessions/session_s_1/api/version").json()["history_session"]["archive"] is None
        )
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait(10)
    stale = tempfile.mkdtemp(prefix=f"{UNPACK_PREFIX}{dead.pid}-")
    mine = tempfile.mkdtemp(prefix=f"{UNPACK_PREFIX}{os.getpid()}-")
    try:
        _remove_stale_unpack_dirs()
        assert not os.path.exists(stale) and os.path.isdir(mine)
    finally:
        shutil.rmtree(mine)
