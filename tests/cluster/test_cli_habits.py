"""The ``ember`` command's habits, read as a user reads them, against one head started as users
start it (``ember start --head``): job entrypoints joined as a shell would, times as local
dates and sizes in binary units in tables (exact in JSON/YAML), ``get`` by name or id
prefix, filter values checked, one error style, ``--format`` everywhere, long cells wrapped,
colour and a spinner only on a terminal."""

from __future__ import annotations

import datetime
import json
import os
import pty
import re
import select
import shlex
import subprocess
import sys
import textwrap
import time

import pytest
import yaml
from ember.cli.humanize import size
from ember.cli.lookup import SHOWN
from ember_test_utils import ember_cli, head_cluster, require_ray_python, wait_until

pytestmark = pytest.mark.timeout(300)

BLOB = 3 * 2**20  # the bytes the named actor keeps in the object store

DRIVER = textwrap.dedent(
    """
    import sys
    import ember

    ember.init(address=sys.argv[1])

    @ember.remote(num_cpus=0)
    class Holder:
        def __init__(self):
            self.blob = ember.put(b"x" * BLOB)

        def ping(self):
            return "pong"

    @ember.remote(num_cpus=0)
    def square(i):
        return i * i

    h = Holder.options(name="habit-holder", lifetime="detached").remote()
    assert ember.get(h.ping.remote()) == "pong"
    assert ember.get([square.remote(i) for i in range(3)]) == [0, 1, 4]
    """
).replace("BLOB", str(BLOB))


@pytest.fixture(scope="module")
def head():
    with head_cluster("--dashboard-port", "0", prefix="emb-habit-") as (root, port, started):
        url = re.search(r"Dashboard: (http://[0-9.:]+)", started.stdout).group(1)
        done = subprocess.run(
            [sys.executable, "-c", DRIVER, f"127.0.0.1:{port}"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        yield {"root": root, "url": url}


def run(head, *args: str, timeout: float = 120, env: dict | None = None):
    """``ember ARGS --address URL`` (the address after a group's subcommand)."""
    argv = [ember_cli(), *args[:2], "--address", head["url"], *args[2:]]
    if args[0] != "job":
        argv = [ember_cli(), args[0], "--address", head["url"], *args[1:]]
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}
    )


def local(ms: int) -> str:
    """Epoch milliseconds as the tables should show them: this machine's local time."""
    when = datetime.datetime.fromtimestamp(ms / 1000)
    return when.strftime("%Y-%m-%d %H:%M:%S.") + f"{when.microsecond // 1000:03d}"


def rows_of(head, *args: str) -> list[dict]:
    done = run(head, *args, "--format", "json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def table_cells(text: str, header: str) -> list[list[str]]:
    """The rows of the table whose header line starts with ``header``, split at the
    columns' starts (cells may hold spaces: dates)."""
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if line.lstrip().startswith(header))
    head_line = lines[at]
    starts = [m.start() for m in re.finditer(r"(?<!\S)\S", head_line)]
    out = []
    for line in lines[at + 1 :]:
        if not line.strip():
            break
        bounds = [*starts[1:], None]
        out.append([line[a:b].strip() for a, b in zip(starts, bounds, strict=True)])
    return out


# -- jobs --------------------------------------------------------------------------------------
def test_job_words_reach_the_shell_as_typed_and_times_read_as_local_dates(head):
    done = run(head, "job", "submit", "--", sys.executable, "-c", "print('a b')")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "a b\n"
    sid = re.search(r"Job '([^']+)' submitted successfully", done.stderr).group(1)
    # One word is a command line as given.
    line = run(head, "job", "submit", "--", "echo one   two && echo three")
    assert line.returncode == 0 and line.stdout == "one two\nthree\n", line.stderr

    jobs = {j["submission_id"]: j for j in rows_of(head, "job", "list")}
    job = jobs[sid]
    assert job["entrypoint"] == f"{sys.executable} -c 'print('\"'\"'a b'\"'\"')'"
    assert isinstance(job["start_time"], int) and isinstance(job["end_time"], int)  # exact ms
    listed = run(head, "job", "list")
    (row,) = [r for r in table_cells(listed.stdout, "SUBMISSION_ID") if r[0] == sid]

    assert row[1] == "SUCCEEDED"
    assert row[3] == local(job["start_time"]) and row[4] == local(job["end_time"])
    assert yaml.safe_load(run(head, "job", "list", "--format", "yaml").stdout) == list(
        jobs.values()
    )
    status = yaml.safe_load(run(head, "job", "status", sid, "--format", "yaml").stdout)
    assert status["status"] == "SUCCEEDED" and status["submission_id"] == sid


def test_ray_job_submit_and_ember_job_submit_record_the_same_entrypoint(head):
    """Ray 2.60's own `ray job submit` is the judge of how ENTRYPOINT's words are joined."""
    ray = require_ray_python().with_name("ray")
    words = ["python", "-c", "print('a b'); import sys; sys.exit(0)", "it's"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EMBER_", "RAY_"))}
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    by_ray = subprocess.run(
        [str(ray), "job", "submit", "--address", head["url"], "--no-wait"]
        + ["--submission-id", "judged-by-ray", "--", *words],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert by_ray.returncode == 0, by_ray.stdout + by_ray.stderr
    ours = run(head, "job", "submit", "--no-wait", "--submission-id", "ours", "--", *words)
    assert ours.returncode == 0, ours.stderr
    jobs = {j["submission_id"]: j["entrypoint"] for j in rows_of(head, "job", "list")}
    assert jobs["ours"] == jobs["judged-by-ray"] == shlex.join(words)


def test_a_long_entrypoint_wraps_in_the_job_table_and_is_never_cut(head):
    words = [f"word{i:02d}" for i in range(16)]
    done = run(head, "job", "submit", "--submission-id", "long-one", "--", "echo", *words)
    assert done.returncode == 0, done.stderr
    listed = run(head, "job", "list").stdout.splitlines()
    at = next(i for i, line in enumerate(listed) if line.startswith("long-one "))
    column = listed[0].index("ENTRYPOINT")
    width = listed[0].index("START_TIME") - column - 2
    parts = [listed[at][column:].split("  ")[0].strip()]
    for line in listed[at + 1 :]:
        if line[:column].strip():
            break  # the next job's row
        parts.append(line[column : column + width].strip())
    assert parts == [  # 48 characters a line at most, broken at spaces
        "echo word00 word01 word02 word03 word04 word05",
        "word06 word07 word08 word09 word10 word11 word12",
        "word13 word14 word15",
    ]
    assert "…" not in "\n".join(listed)


# -- get ---------------------------------------------------------------------------------------
def test_get_takes_a_name_or_an_id_prefix_and_fails_on_nothing(head):
    (actor,) = [a for a in rows_of(head, "list", "actors") if a["name"] == "habit-holder"]
    full = actor["actor_id"]
    by_name = yaml.safe_load(run(head, "get", "actors", "habit-holder").stdout)
    by_prefix = yaml.safe_load(run(head, "get", "actors", full[:8].upper()).stdout)
    assert by_name[0]["actor_id"] == by_prefix[0]["actor_id"] == full
    assert by_name[0]["state"] == "ALIVE"

    missing = run(head, "get", "actors", "no-such-actor")
    assert missing.returncode == 1 and missing.stdout == ""
    assert missing.stderr == (
        "ember: error: no actor has the id, id prefix or name 'no-such-actor'; "
        "`ember list actors` lists them\n"
    )
    # Ids of one job end alike (the job's bytes, as in Ray) and begin alike by chance only:
    # the longest beginning two ids share is a prefix of several.
    tasks = [t for t in rows_of(head, "list", "tasks") if t["func_or_class_name"] == "square"]
    ids = sorted(t["task_id"] for t in rows_of(head, "list", "tasks"))
    pairs = zip(ids, ids[1:], strict=False)
    shared = max((os.path.commonprefix([a, b]) for a, b in pairs), key=len)
    assert shared, ids
    many = run(head, "get", "tasks", shared)
    assert many.returncode == 2
    named = sorted({t["task_id"] for t in rows_of(head, "list", "tasks")})
    matching = [t for t in named if t.startswith(shared)]
    assert many.stderr.startswith(f"ember: error: '{shared}' matches {len(matching)} tasks: ")
    shown = [t for t in matching if t in many.stderr]  # the first few, in the listing's order
    assert len(shown) == min(len(matching), SHOWN), (shown, many.stderr)
    one = tasks[0]["task_id"]
    got = json.loads(run(head, "get", "tasks", one[:-6], "--format", "json").stdout)
    assert [r["task_id"] for r in got] == [one] and got[0]["state"] == "FINISHED"
    shown = run(head, "get", "tasks", one, "--format", "table").stdout.splitlines()
    values = dict(line.split(None, 1) for line in shown if " " in line.strip())
    for column in ("creation_time_ms", "start_time_ms", "end_time_ms"):
        assert values[column] == local(got[0][column]), (column, shown)
    (node,) = rows_of(head, "list", "nodes")
    got = yaml.safe_load(run(head, "get", "nodes", node["node_id"][:6]).stdout)
    assert got[0]["node_id"] == node["node_id"]
    none = run(head, "get", "nodes", "zz")
    assert none.returncode == 1
    assert none.stderr == (
        "ember: error: no node has the id or id prefix 'zz'; `ember list nodes` lists them\n"
    )


# -- filters -----------------------------------------------------------------------------------
def test_a_filter_value_the_column_cannot_hold_names_the_valid_ones(head):
    bad = run(head, "list", "actors", "--filter", "state=RUNING")
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.splitlines()[-1] == (
        "ember: error: Invalid value for --filter: state must be one of DEPENDENCIES_UNREADY, "
        "PENDING_CREATION, ALIVE, RESTARTING, DEAD (not 'RUNING')"
    )
    key = run(head, "list", "actors", "--filter", "colour=red")
    assert key.returncode == 2 and key.stderr.splitlines()[-1] == (
        "ember: error: Invalid value for --filter: 'colour' is not a filter key of actors; "
        "the keys are: actor_id, class_name, job_id, name, node_id, pid, placement_group_id, "
        "ray_namespace, repr_name, state"
    )
    flag = run(head, "list", "workers", "--filter", "is_alive=maybe")
    assert flag.returncode == 2
    assert flag.stderr.endswith("is_alive is true or false (not 'maybe')\n")
    number = run(head, "list", "workers", "--filter", "pid=abc")
    assert number.returncode == 2 and number.stderr.endswith("pid is a whole number (not 'abc')\n")
    ok = run(head, "list", "actors", "--filter", "state=alive")  # any case, as before
    assert ok.returncode == 0 and "habit-holder" in ok.stdout


# -- sizes -------------------------------------------------------------------------------------
def test_sizes_read_in_binary_units_in_tables_and_exact_in_json(head):
    objects = rows_of(head, "list", "objects")
    (blob,) = [o for o in objects if o["object_size"] >= BLOB]
    assert blob["object_size"] < BLOB + 4096  # the bytes and a small header, exact
    text = run(head, "list", "objects").stdout
    (row,) = [r for r in table_cells(text, "OBJECT_ID") if r[0] == blob["object_id"]]
    assert row[1] == size(blob["object_size"]) == "3.0 MiB"
    (node,) = rows_of(head, "list", "nodes")
    assert node["resources_total"]["object_store_memory"] == 64 * 2**20
    listed = run(head, "list", "nodes").stdout
    assert '"object_store_memory":"64.0 MiB"' in listed
    memory = run(head, "memory").stdout
    assert re.search(r"\| 3\.0 MiB +\| PINNED_IN_MEMORY|\| 3\.0 MiB +\| LOCAL_REFERENCE", memory)
    exact = run(head, "memory", "--units", "B").stdout  # Ray's own layout, on request
    assert f"{float(blob['object_size']):.1f} B" in exact


# -- errors and formats ------------------------------------------------------------------------
def test_one_error_style_naming_commands(head):
    failing = [
        (("get", "workers", "nope"), 1),
        (("job", "status", "no-such-job"), 1),
        (("job", "logs", "no-such-job"), 1),
        (("logs", "no-such-file.log"), 1),
        (("list", "tasks", "--filter", "oops"), 2),
        (("kill-actor", "--bogus"), 2),
        (("kill-actor", "no-such-actor"), 1),
        (("stack", "--node", "zzzz"), 1),
        (("timeline", "--node", "zzzz", "-o", "/dev/null"), 1),
    ]
    for args, code in failing:
        done = run(head, *args)
        assert done.returncode == code, (args, done.stderr)
        last = done.stderr.splitlines()[-1]
        assert last.startswith("ember: error: "), (args, done.stderr)
        assert "Error:" not in done.stderr and "/api/" not in done.stderr, (args, done.stderr)
    # The dashboard's own words point at a REST route; the CLI's at the command.
    actor = run(head, "logs", "--actor", "no-such-actor")
    assert (
        actor.stderr == "ember: error: no actor 'no-such-actor'; `ember list actors` lists them\n"
    )
    job = run(head, "job", "status", "no-such-job")
    assert (
        job.stderr
        == "ember: error: no job 'no-such-job' in the cluster; `ember job list` lists them\n"
    )
    gone = subprocess.run(
        [ember_cli(), "status", "--address", "http://127.0.0.1:9"], capture_output=True, text=True
    )
    assert gone.returncode == 1 and gone.stderr.startswith("ember: error: could not reach")
    helped = subprocess.run([ember_cli(), "--help"], capture_output=True, text=True).stdout
    assert "Exit codes:\n    0   success\n    1   the thing asked failed" in helped
    assert "    2   usage error" in helped and "    130 interrupted (Ctrl-C)" in helped


def test_every_listing_or_showing_command_takes_format(head):
    for args in (
        ("status",),
        ("memory",),
        ("job", "list"),
        ("logs",),
        ("list", "nodes"),
        ("get", "actors", "habit-holder"),
        ("summary", "tasks"),
        ("dashboard",),
    ):
        as_json = run(head, *args, "--format", "json")
        as_yaml = run(head, *args, "--format", "yaml")
        assert as_json.returncode == 0 and as_yaml.returncode == 0, (args, as_json.stderr)
        data, again = json.loads(as_json.stdout), yaml.safe_load(as_yaml.stdout)
        if args[0] in ("status", "memory", "logs", "dashboard"):  # figures that move
            assert type(data) is type(again) and data, args
        else:
            assert data == again, args
    status = yaml.safe_load(run(head, "status", "--format", "yaml").stdout)
    assert [n["state"] for n in status["active_nodes"]] == ["ALIVE"]


# -- terminal ----------------------------------------------------------------------------------
def on_terminal(argv: list[str], no_color: bool, timeout: float = 120) -> tuple[int, str]:
    """Runs ``argv`` with stdout and stderr on a pseudo-terminal (NO_COLOR set or not); its
    exit status and all it wrote there."""
    env = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
    env["TERM"] = "xterm"
    if no_color:
        env["NO_COLOR"] = "1"
    master, slave = pty.openpty()
    proc = subprocess.Popen(argv, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    out = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
        elif proc.poll() is not None:
            break
    os.close(master)
    code = proc.wait(timeout=max(deadline - time.monotonic(), 1))
    return code, out.decode("utf-8", "replace")


def test_colour_only_on_a_terminal_without_no_color(head):
    argv = [ember_cli(), "get", "actors", "--address", head["url"], "no-such-actor"]
    code, out = on_terminal(argv, no_color=False)
    assert code == 1 and "\x1b[31m\x1b[1member: error: \x1b[0m" in out
    code, out = on_terminal(argv, no_color=True)
    assert code == 1 and "\x1b" not in out and out.startswith("ember: error: no actor")
    piped = run(head, "get", "actors", "no-such-actor", env={"TERM": "xterm"})
    assert "\x1b" not in piped.stderr


def test_a_pending_job_shows_a_spinner_on_a_terminal_and_nothing_on_a_pipe(head):
    # The head has one CPU: a job holding it keeps the next one PENDING for a few seconds.
    hold = ["job", "submit", "--no-wait", "--entrypoint-num-cpus", "1", "--", "sleep 6"]
    assert run(head, *hold).returncode == 0
    argv = [ember_cli(), "job", "submit", "--address", head["url"], "--entrypoint-num-cpus"]
    argv += ["1", "--", "echo started"]
    code, out = on_terminal(argv, no_color=True)
    assert code == 0, out
    assert re.search(r"\r[|/\\-] waiting for job '[^']+' to start \(\d+ s\)", out), out
    assert "started" in out
    assert run(head, *hold).returncode == 0
    piped = run(head, "job", "submit", "--entrypoint-num-cpus", "1", "--", "echo again")
    assert piped.returncode == 0, piped.stderr
    assert "waiting for job" not in piped.stderr and "\r" not in piped.stderr + piped.stdout
    assert piped.stdout == "again\n"
    wait_until(
        lambda: all(j["status"] != "RUNNING" for j in rows_of(head, "job", "list")),
        timeout=60,
        interval=0.5,
        message="every job to end",
    )


def test_archive_draws_its_spinner_on_a_terminal_only(head, tmp_path):
    argv = [ember_cli(), "archive", "--address", head["url"], "-o", str(tmp_path / "a.tar.gz")]
    code, out = on_terminal(argv, no_color=True)
    assert code == 0, out
    assert re.search(r"\r[|/\\-] packing session_\S+ \(\d+ s\)", out), out
    piped = run(head, "archive", "-o", str(tmp_path / "b.tar.gz"))
    assert piped.returncode == 0, piped.stderr
    assert "packing" not in piped.stderr and "\r" not in piped.stderr + piped.stdout
    assert piped.stdout.startswith("packed ") and (tmp_path / "b.tar.gz").stat().st_size > 0
