"""Starting and stopping: init/shutdown, the session directory, log_to_driver, drivers that
die (SIGKILL, SIGTERM, an uncaught exception, Ctrl-C) leaving nothing behind, local mode,
cluster resources and the runtime context. Real processes, no mocks."""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time

import ember
import psutil
import pytest
from ember.exceptions import TaskError
from ember.session import DEFAULT_TEMP_DIR
from ember_test_utils import assert_no_ember_children, ember_children, wait_until

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def clean():
    """For tests that call ember.init themselves: stop whatever they started."""
    if ember.is_initialized():
        ember.shutdown()
    yield
    ember.shutdown()
    assert_no_ember_children()


@pytest.fixture
def short_tmp():
    """A short directory under /tmp (Unix socket paths are limited to ~108 bytes)."""
    path = tempfile.mkdtemp(prefix="emb-", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


# -- init / shutdown ---------------------------------------------------------------------
def test_init_shutdown_is_initialized(clean):
    assert not ember.is_initialized()
    ctx = ember.init(num_cpus=1)
    assert ember.is_initialized()
    assert ctx.session_dir and ctx["session_dir"] == ctx.session_dir
    assert ember_children(), "init started no processes"
    ember.shutdown()
    assert not ember.is_initialized()
    assert_no_ember_children()


def test_second_init_raises_unless_ignore_reinit_error(clean):
    ctx = ember.init(num_cpus=1)
    with pytest.raises(RuntimeError, match="ignore_reinit_error"):
        ember.init(num_cpus=1)
    again = ember.init(num_cpus=1, ignore_reinit_error=True)
    assert again.session_dir == ctx.session_dir
    assert ember.is_initialized()

    @ember.remote
    def one():
        return 1

    assert ember.get(one.remote(), timeout=30) == 1


def test_unknown_init_kwarg_raises_type_error_and_starts_nothing(clean):
    with pytest.raises(TypeError, match="no_such_option"):
        ember.init(num_cpus=1, no_such_option=True)
    with pytest.raises(ValueError, match="num_cpus"):
        ember.init(resources={"CPU": 2})
    assert not ember.is_initialized()
    assert ember_children() == []


def test_shutdown_twice_and_without_init_is_safe(clean):
    ember.shutdown()  # never initialized
    ember.init(num_cpus=1)
    ember.shutdown()
    ember.shutdown()
    assert not ember.is_initialized()
    assert_no_ember_children()


def test_init_task_shutdown_init_again(clean):
    @ember.remote
    def pid_and_value(x):
        return os.getpid(), x * 2

    first = ember.init(num_cpus=1)
    pid1, v = ember.get(pid_and_value.remote(21), timeout=30)
    assert v == 42
    ember.shutdown()
    assert_no_ember_children()
    assert not psutil.pid_exists(pid1) or psutil.Process(pid1).status() == psutil.STATUS_ZOMBIE
    second = ember.init(num_cpus=1)
    assert second.session_dir != first.session_dir
    assert second.node_id != first.node_id
    pid2, v = ember.get(pid_and_value.remote(5), timeout=30)
    assert v == 10 and pid2 != pid1
    ref = ember.put("after restart")
    assert ember.get(ref) == "after restart"


def test_shutdown_while_tasks_and_actor_run_then_init_again(clean, tmp_path):
    ember.init(num_cpus=2)
    marks = tmp_path / "marks"
    marks.mkdir()

    @ember.remote
    def forever(i):
        (marks / f"task-{i}").touch()
        time.sleep(600)

    @ember.remote(num_cpus=0)
    class Spinner:
        def spin(self):
            (marks / "actor").touch()
            time.sleep(600)

    refs = [forever.remote(i) for i in range(2)]
    a = Spinner.remote()
    spin = a.spin.remote()
    wait_until(lambda: len(os.listdir(marks)) == 3, 30, message="tasks and actor running")
    start = time.monotonic()
    ember.shutdown()
    assert time.monotonic() - start < 15
    assert_no_ember_children()
    del refs, spin, a
    ember.init(num_cpus=1)
    assert ember.get(ember.put("fresh")) == "fresh"

    @ember.remote
    def ok():
        return "ok"

    assert ember.get(ok.remote(), timeout=30) == "ok"


def test_init_with_an_unreachable_address_raises_and_starts_nothing(clean, short_tmp, monkeypatch):
    monkeypatch.setenv("EMBER_TMPDIR", short_tmp)  # "auto" must not find another test's node
    with pytest.raises(ConnectionError):
        ember.init(address="auto")
    assert not ember.is_initialized()
    assert ember_children() == []


def test_init_as_context_manager_shuts_down(clean):
    with ember.init(num_cpus=1):
        assert ember.is_initialized()
        assert ember.get(ember.put(3)) == 3
    assert not ember.is_initialized()
    assert_no_ember_children()


# -- the session directory ---------------------------------------------------------------
def _log_files(session_dir):
    return set(os.listdir(os.path.join(session_dir, "logs")))


def test_session_dir_layout_and_logs(ember_start):
    ctx = ember_start(num_cpus=2)
    session = ctx.session_dir
    assert os.path.isdir(session)
    assert os.path.dirname(session) == DEFAULT_TEMP_DIR == "/tmp/ember-sessions"
    assert os.path.basename(session).startswith("session_")
    assert os.path.isdir(os.path.join(session, "logs"))
    sockets = os.path.join(session, "sockets")
    assert os.path.isdir(sockets)
    assert os.stat(sockets).st_mode & 0o777 == 0o700
    latest = "/tmp/ember-sessions/session_latest"
    assert os.path.islink(latest)
    target = os.path.realpath(latest)
    # Other Ember drivers on this machine may have started a newer session since.
    assert target == os.path.realpath(session) or os.path.basename(target) > os.path.basename(
        session
    ), (target, session)

    @ember.remote
    def pid():
        return os.getpid()

    pids = set(ember.get([pid.remote() for _ in range(4)], timeout=30))

    def logs_present():
        files = _log_files(session)
        if "raylet.log" not in files or "gcs_server.log" not in files:
            return False
        return all(
            any(f.startswith("worker-") and f.endswith(f"-{p}{ext}") for f in files)
            for p in pids
            for ext in (".out", ".err")
        )

    wait_until(logs_present, 10, message=f"raylet/gcs/worker log files in {session}/logs")


def test_logging_level_reaches_the_nodes_processes(ember_start):
    import logging

    ctx = ember_start(num_cpus=2, logging_level="DEBUG")
    assert logging.getLogger("ember").getEffectiveLevel() == logging.DEBUG  # the driver

    @ember.remote
    def worker_level():
        return logging.getLogger("ember").getEffectiveLevel()

    @ember.remote
    class ActorLevel:
        def level(self):
            return logging.getLogger("ember.actor").getEffectiveLevel()

    assert ember.get(worker_level.remote(), timeout=30) == logging.DEBUG
    assert ember.get(ActorLevel.remote().level.remote(), timeout=30) == logging.DEBUG

    @ember.remote
    def log_from_ember_internals() -> tuple[int, str]:
        logging.getLogger("ember.core_worker").debug("a debug record from a worker")
        return os.getpid(), ember.get_runtime_context().get_worker_id()

    # A worker's own records reach worker-<id>-<pid>.log (they were dropped: no handler).
    pid, worker_id = ember.get(log_from_ember_internals.remote(), timeout=30)
    worker_log = os.path.join(ctx.session_dir, "logs", f"worker-{worker_id[:16]}-{pid}.log")
    wait_until(
        lambda: (
            os.path.exists(worker_log) and "a debug record from a worker" in open(worker_log).read()
        ),
        10,
        message=f"the DEBUG record in {worker_log}",
    )

    # The GCS and the raylet log at DEBUG too: each says so in its first line (an INFO line,
    # so that every component's log has one whatever its level).
    def debug_lines():
        logs = os.path.join(ctx.session_dir, "logs")
        found = {}
        for name in ("gcs_server.log", "raylet.log"):
            path = os.path.join(logs, name)
            first = open(path).readline() if os.path.exists(path) else ""
            found[name] = "started" in first and first.rstrip().endswith("logging at DEBUG")
        return all(found.values())

    wait_until(debug_lines, 10, message="DEBUG lines in gcs_server.log and raylet.log")


def test_default_logging_level_is_info_in_workers(ember_start):
    import logging

    ember_start(num_cpus=1)

    @ember.remote
    def worker_level():
        return logging.getLogger("ember").getEffectiveLevel()

    assert ember.get(worker_level.remote(), timeout=30) == logging.INFO


def test_temp_dir_option_puts_the_session_there(ember_start, short_tmp):
    ctx = ember_start(num_cpus=1, temp_dir=short_tmp)
    session = ctx.session_dir
    assert os.path.dirname(session) == short_tmp
    assert os.path.isdir(os.path.join(session, "logs"))
    assert os.path.isdir(os.path.join(session, "sockets"))
    assert os.path.realpath(os.path.join(short_tmp, "session_latest")) == os.path.realpath(session)
    assert os.listdir(os.path.join(session, "sockets")), "no sockets in the session dir"

    @ember.remote
    def hello():
        return "hi"

    assert ember.get(hello.remote(), timeout=30) == "hi"
    wait_until(lambda: "raylet.log" in _log_files(session), 10, message="raylet.log")


def test_too_long_temp_dir_fails_clearly_and_leaves_nothing(clean, short_tmp):
    deep = os.path.join(short_tmp, "x" * 90)
    os.makedirs(deep)
    with pytest.raises(Exception, match="(?i)too long|temp_dir"):
        ember.init(num_cpus=1, temp_dir=deep)
    assert not ember.is_initialized()
    assert_no_ember_children()


# -- driver scripts run as subprocesses --------------------------------------------------
DRIVER_PRELUDE = """
import json, os, signal, sys, time
import psutil
import ember
# As when started from a terminal, even if the test runner itself ignores SIGINT (a
# background job of a non-interactive shell inherits SIGINT ignored).
signal.signal(signal.SIGINT, signal.default_int_handler)
"""


class Driver:
    """A driver script in its own process, its stdout read line by line with deadlines."""

    def __init__(self, tmp_path, body, *, new_session=False, args=()):
        # Its own directory: the script's directory is sys.path[0].
        d = tmp_path / "driver"
        d.mkdir(exist_ok=True)
        script = d / "driver.py"
        script.write_text(DRIVER_PRELUDE + textwrap.dedent(body))
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            [sys.executable, str(script), *args],
            cwd=str(d),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            start_new_session=new_session,
        )
        self.lines: list[str] = []
        self.err_lines: list[str] = []
        self._q: queue.Queue = queue.Queue()
        threading.Thread(
            target=self._pump, args=(self.proc.stdout, self.lines), daemon=True
        ).start()
        threading.Thread(
            target=self._pump, args=(self.proc.stderr, self.err_lines), daemon=True
        ).start()

    def _pump(self, stream, sink):
        for line in stream:
            sink.append(line.rstrip("\n"))
            self._q.put(None)

    def wait_for_line(self, predicate, timeout):
        deadline = time.monotonic() + timeout
        while True:
            for line in list(self.lines):
                if predicate(line):
                    return line
            if self.proc.poll() is not None:
                time.sleep(0.2)  # let the pumps drain
                for line in list(self.lines):
                    if predicate(line):
                        return line
                pytest.fail(
                    f"driver exited ({self.proc.returncode}) before the line appeared.\n"
                    f"stdout: {self.lines[-30:]}\nstderr: {self.err_lines[-30:]}"
                )
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(
                    f"timed out after {timeout} s waiting for a line.\n"
                    f"stdout: {self.lines[-30:]}\nstderr: {self.err_lines[-30:]}"
                )
            try:
                self._q.get(timeout=min(left, 0.2))
            except queue.Empty:
                pass

    def json_line(self, key, timeout=60):
        line = self.wait_for_line(lambda s: s.startswith(key + " "), timeout)
        return json.loads(line[len(key) + 1 :])

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)

    def descendants(self):
        try:
            return psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []


def _alive(procs):
    left = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                left.append(p)
        except psutil.NoSuchProcess:
            continue
    return left


def _node_processes(driver: Driver, session_dir: str, extra_pids=()):
    """Every process of the driver's node: its descendants, anything naming its session
    directory, and the pids it reported."""
    procs = {p.pid: p for p in driver.descendants()}
    for p in psutil.process_iter(["cmdline"]):
        try:
            if session_dir in " ".join(p.info["cmdline"] or []):
                procs.setdefault(p.pid, p)
                for c in p.children(recursive=True):
                    procs.setdefault(c.pid, c)
        except psutil.Error:
            continue
    for pid in extra_pids:
        if pid not in procs:
            try:
                procs[pid] = psutil.Process(pid)
            except psutil.NoSuchProcess:
                pass
    procs.pop(driver.proc.pid, None)
    return list(procs.values())


def _arenas_of(driver_pid):
    return [f for f in os.listdir("/dev/shm") if f.startswith(f"ember-{driver_pid}-")]


def _assert_all_gone(procs, timeout, what, driver_pid=None):
    deadline = time.monotonic() + timeout
    while _alive(procs) or (driver_pid is not None and _arenas_of(driver_pid)):
        if not _alive(procs) and time.monotonic() > deadline:
            left = _arenas_of(driver_pid)
            for f in left:  # clean up what the runtime left
                try:
                    os.unlink(os.path.join("/dev/shm", f))
                except OSError:
                    pass
            pytest.fail(f"{what}: shared-memory arena left behind after {timeout} s: {left}")
        if time.monotonic() > deadline:
            left = []
            for p in _alive(procs):
                try:
                    left.append((p.pid, " ".join(p.cmdline())[:150]))
                except psutil.Error:
                    pass
            for p in _alive(procs):  # clean up what the runtime left, so later tests run
                try:
                    p.kill()
                except psutil.Error:
                    pass
            pytest.fail(f"{what}: processes left behind after {timeout} s: {left}")
        time.sleep(0.05)


BUSY_DRIVER = """
mode = sys.argv[1]
ctx = ember.init(num_cpus=2)
marks = os.path.join(os.getcwd(), "marks")
os.makedirs(marks, exist_ok=True)

@ember.remote
def pid():
    return os.getpid()

@ember.remote
def forever(i):
    open(os.path.join(marks, f"task-{i}"), "w").close()
    time.sleep(600)

@ember.remote(num_cpus=0)
class Spinner:
    def pid(self):
        return os.getpid()
    def spin(self):
        open(os.path.join(marks, "actor"), "w").close()
        time.sleep(600)

a = Spinner.remote()
worker_pids = set(ember.get([pid.remote() for _ in range(4)], timeout=60))
worker_pids.add(ember.get(a.pid.remote(), timeout=60))
refs = [forever.remote(i) for i in range(2)]
spin = a.spin.remote()
deadline = time.monotonic() + 60
while len(os.listdir(marks)) < 3 and time.monotonic() < deadline:
    time.sleep(0.02)
node = [p.pid for p in psutil.Process().children(recursive=True)]
print("NODE " + json.dumps({"session_dir": ctx.session_dir,
                            "pids": sorted(worker_pids | set(node)),
                            "running": sorted(os.listdir(marks))}), flush=True)
if mode in ("raise", "exit", "os_exit"):
    sys.stdin.readline()  # the test has listed the node's processes: end now
    if mode == "raise":
        raise RuntimeError("uncaught in the driver")
    if mode == "os_exit":
        os._exit(3)  # no atexit hooks, no shutdown
    sys.exit(0)  # the script ends with tasks and the actor still running
ember.get(refs + [spin])
"""


def _cmdline(p):
    try:
        return " ".join(p.cmdline())
    except psutil.Error:
        return ""


def _start_busy_driver(tmp_path, mode, new_session=False):
    drv = Driver(tmp_path, BUSY_DRIVER, args=(mode,), new_session=new_session)
    info = drv.json_line("NODE", timeout=90)
    assert info["running"] == ["actor", "task-0", "task-1"], info
    assert _arenas_of(drv.proc.pid), "the driver's node has no arena in /dev/shm"
    procs = _node_processes(drv, info["session_dir"], info["pids"])
    names = " ".join(_cmdline(p) for p in procs)
    assert "ember.gcs.server" in names and "ember.raylet.raylet" in names, names
    assert len(procs) >= 5, [_cmdline(p) for p in procs]  # gcs, raylet, >= 3 workers
    return drv, info, procs


def test_sigkilled_driver_leaves_no_process(tmp_path):
    drv, info, procs = _start_busy_driver(tmp_path, "block")
    try:
        drv.proc.send_signal(signal.SIGKILL)
        drv.proc.wait(10)
        _assert_all_gone(procs, 10, "SIGKILL", drv.proc.pid)
    finally:
        drv.stop()


def test_sigtermed_driver_leaves_no_process(tmp_path):
    drv, info, procs = _start_busy_driver(tmp_path, "block")
    try:
        drv.proc.send_signal(signal.SIGTERM)
        rc = drv.proc.wait(15)
        assert rc == -signal.SIGTERM, (rc, drv.err_lines[-20:])
        _assert_all_gone(procs, 10, "SIGTERM", drv.proc.pid)
    finally:
        drv.stop()


def test_driver_with_uncaught_exception_leaves_no_process(tmp_path):
    drv, info, procs = _start_busy_driver(tmp_path, "raise")
    try:
        drv.proc.stdin.write("go\n")
        drv.proc.stdin.flush()
        rc = drv.proc.wait(20)
        assert rc == 1
        _assert_all_gone(procs, 10, "uncaught exception", drv.proc.pid)
        time.sleep(0.2)  # let the stderr pump drain after exit
        assert any("uncaught in the driver" in line for line in drv.err_lines), drv.err_lines
    finally:
        drv.stop()


@pytest.mark.parametrize("mode,code", [("exit", 0), ("os_exit", 3)])
def test_driver_ending_with_work_running_leaves_no_process(tmp_path, mode, code):
    drv, info, procs = _start_busy_driver(tmp_path, mode)
    try:
        drv.proc.stdin.write("go\n")
        drv.proc.stdin.flush()
        assert drv.proc.wait(20) == code, drv.err_lines[-20:]
        _assert_all_gone(procs, 10, f"driver end ({mode})", drv.proc.pid)
    finally:
        drv.stop()


def test_ctrl_c_during_get_leaves_no_process(tmp_path):
    # Ctrl-C in a terminal signals the whole foreground process group.
    drv, info, procs = _start_busy_driver(tmp_path, "block", new_session=True)
    try:
        os.killpg(drv.proc.pid, signal.SIGINT)
        rc = drv.proc.wait(20)
        assert rc != 0
        _assert_all_gone(procs, 10, "Ctrl-C (SIGINT to the process group)", drv.proc.pid)
        time.sleep(0.2)
        assert any("KeyboardInterrupt" in line for line in drv.err_lines), drv.err_lines[-20:]
    finally:
        drv.stop()


def test_sigint_to_driver_only_during_get_leaves_no_process(tmp_path):
    drv, info, procs = _start_busy_driver(tmp_path, "block")
    try:
        drv.proc.send_signal(signal.SIGINT)
        rc = drv.proc.wait(20)
        assert rc != 0
        _assert_all_gone(procs, 10, "SIGINT to the driver", drv.proc.pid)
    finally:
        drv.stop()


# -- log_to_driver -----------------------------------------------------------------------
LOG_DRIVER = """
log_to_driver = sys.argv[1] == "on"
ctx = ember.init(num_cpus=2, log_to_driver=log_to_driver)

@ember.remote
def talk():
    print("hello from task")
    print("warning from task", file=sys.stderr)
    return os.getpid()

@ember.remote
class Talker:
    def talk(self):
        print("hello from actor")
        return os.getpid()

t = Talker.remote()
task_pid = ember.get(talk.remote(), timeout=60)
actor_pid = ember.get(t.talk.remote(), timeout=60)
print("PIDS " + json.dumps({"task": task_pid, "actor": actor_pid,
                            "session_dir": ctx.session_dir}), flush=True)
sys.stdin.read()  # the test closes stdin to end the driver
"""


def test_log_to_driver_prints_worker_lines_with_prefixes(tmp_path):
    drv = Driver(tmp_path, LOG_DRIVER, args=("on",))
    try:
        pids = drv.json_line("PIDS", timeout=90)
        drv.wait_for_line(lambda s: s == f"(pid={pids['task']}) hello from task", 15)
        drv.wait_for_line(lambda s: s == f"(Talker pid={pids['actor']}) hello from actor", 15)
        # stderr of a worker goes to the driver's stderr, with the same prefix
        wait_until(
            lambda: f"(pid={pids['task']}) warning from task" in drv.err_lines,
            15,
            message="the task's stderr line in the driver's stderr",
        )
        assert not any("warning from task" in line for line in drv.lines)
        drv.proc.stdin.close()
        assert drv.proc.wait(20) == 0, drv.err_lines[-20:]
    finally:
        drv.stop()


def test_log_to_driver_false_keeps_worker_lines_out(tmp_path):
    drv = Driver(tmp_path, LOG_DRIVER, args=("off",))
    try:
        pids = drv.json_line("PIDS", timeout=90)
        logs = os.path.join(pids["session_dir"], "logs")

        def printed_in_worker_logs():
            text = ""
            for f in os.listdir(logs):
                if f.startswith("worker-") and f.endswith(".out"):
                    with open(os.path.join(logs, f), errors="replace") as fh:
                        text += fh.read()
            return "hello from task" in text and "hello from actor" in text

        # The lines were printed (into the worker logs) ...
        wait_until(printed_in_worker_logs, 15, message="worker prints in the log files")
        # ... and a forwarder ticks every 0.1 s: give it ample time to (wrongly) forward them.
        time.sleep(1.5)
        drv.proc.stdin.close()
        assert drv.proc.wait(20) == 0, drv.err_lines[-20:]
        time.sleep(0.2)
        out = "\n".join(drv.lines + drv.err_lines)
        assert "hello from task" not in out and "hello from actor" not in out, out
        assert "warning from task" not in out, out
    finally:
        drv.stop()


# -- local mode --------------------------------------------------------------------------
def test_local_mode_runs_in_the_driver_process(ember_start):
    ember_start(local_mode=True)
    assert ember_children() == []

    @ember.remote
    def where(x):
        return os.getpid(), x + 1

    @ember.remote
    class Counter:
        def __init__(self):
            self.n = 0

        def incr(self):
            self.n += 1
            return os.getpid(), self.n

    pid, v = ember.get(where.remote(1))
    assert pid == os.getpid() and v == 2
    c = Counter.remote()
    ember.get(c.incr.remote())
    pid, n = ember.get(c.incr.remote())
    assert pid == os.getpid() and n == 2
    assert ember.get(where.remote(ember.put(10)))[1] == 11
    assert ember.get([where.remote(i) for i in range(3)]) == [
        (os.getpid(), i + 1) for i in range(3)
    ]
    assert ember_children() == []


def test_local_mode_wait_nested_tasks_and_context(ember_start):
    ember_start(local_mode=True, num_cpus=2)

    @ember.remote
    def leaf(x):
        return x * 10

    @ember.remote
    def parent(x):
        return ember.get(leaf.remote(x)) + 1

    refs = [parent.remote(i) for i in range(3)]
    ready, not_ready = ember.wait(refs, num_returns=3, timeout=10)
    assert ready == refs and not_ready == []
    assert ember.get(refs) == [1, 11, 21]
    assert ember.cluster_resources()["CPU"] == 2
    assert ember.get_runtime_context().get_job_id()

    @ember.remote
    class Named:
        def hi(self):
            return "hi"

    Named.options(name="the-one").remote()
    assert ember.get(ember.get_actor("the-one").hi.remote()) == "hi"


def test_local_mode_errors_raise_like_normal_mode(ember_start):
    ember_start(local_mode=True)

    @ember.remote
    def boom():
        raise ValueError("bad value")

    @ember.remote
    class A:
        def fail(self):
            raise KeyError("missing")

    ref = boom.remote()  # the error surfaces at get, not at .remote()
    with pytest.raises(ValueError, match="bad value") as info:
        ember.get(ref)
    assert isinstance(info.value, TaskError)
    with pytest.raises(KeyError):
        ember.get(A.remote().fail.remote())


# -- cluster views -----------------------------------------------------------------------
def test_nodes_and_cluster_resources(ember_start):
    ember_start(num_cpus=3, resources={"foo": 2})
    nodes = ember.nodes()
    assert len(nodes) == 1
    [node] = nodes
    assert node["Alive"] is True
    assert node["Resources"]["CPU"] == 3
    assert node["Resources"]["foo"] == 2
    assert node["NodeID"] == ember.get_runtime_context().get_node_id()
    total = ember.cluster_resources()
    assert total["CPU"] == 3.0
    assert total["foo"] == 2.0
    avail = ember.available_resources()
    assert avail["CPU"] == 3.0 and avail["foo"] == 2.0


def test_available_resources_drop_while_a_task_holds_them(ember_start, tmp_path):
    ember_start(num_cpus=3, resources={"foo": 2})
    gate = str(tmp_path / "gate")

    @ember.remote(resources={"foo": 1})
    def hold(path):
        deadline = time.monotonic() + 60
        while not os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.01)
        return True

    ref = hold.remote(gate)
    try:
        wait_until(
            lambda: (
                ember.available_resources().get("CPU") == 2.0
                and ember.available_resources().get("foo") == 1.0
            ),
            15,
            interval=0.05,
            message="CPU and foo to drop by one while the task runs",
        )
        assert ember.cluster_resources()["CPU"] == 3.0
    finally:
        open(gate, "w").close()
    assert ember.get(ref, timeout=30)

    def restored():
        avail = ember.available_resources()
        return avail.get("CPU") == 3.0 and avail.get("foo") == 2.0

    wait_until(restored, 15, interval=0.05, message="resources to come back")


def test_actor_holds_its_cpu_until_killed(ember_start):
    ember_start(num_cpus=2)

    @ember.remote(num_cpus=1)
    class Holder:
        def ping(self):
            return "pong"

    h = Holder.remote()
    assert ember.get(h.ping.remote(), timeout=30) == "pong"
    wait_until(
        lambda: ember.available_resources().get("CPU") == 1.0,
        15,
        interval=0.05,
        message="the actor's CPU to be taken",
    )
    ember.kill(h)
    wait_until(
        lambda: ember.available_resources().get("CPU") == 2.0,
        15,
        interval=0.05,
        message="the killed actor's CPU to come back",
    )


def test_crashed_task_gives_its_resources_back(ember_start):
    ember_start(num_cpus=2, resources={"foo": 1})

    @ember.remote(max_retries=0, resources={"foo": 1})
    def crash():
        os._exit(1)

    with pytest.raises(ember.exceptions.WorkerCrashedError):
        ember.get(crash.remote(), timeout=60)

    def restored():
        avail = ember.available_resources()
        return avail.get("CPU") == 2.0 and avail.get("foo") == 1.0

    wait_until(restored, 15, interval=0.05, message="resources after a crash")

    @ember.remote(resources={"foo": 1})
    def fine():
        return 1

    assert ember.get(fine.remote(), timeout=30) == 1


def test_runtime_context_ids(shared_node):
    ctx = ember.get_runtime_context()
    job_id = ctx.get_job_id()
    node_id = ctx.get_node_id()
    assert job_id and node_id
    assert ctx.get_actor_id() is None

    @ember.remote
    def inside():
        c = ember.get_runtime_context()
        return c.get_job_id(), c.get_node_id(), c.get_task_id(), c.get_actor_id()

    @ember.remote
    class Who:
        def ids(self):
            c = ember.get_runtime_context()
            return c.get_job_id(), c.get_task_id(), c.get_actor_id()

    j, n, t1, a = ember.get(inside.remote(), timeout=30)
    assert (j, n, a) == (job_id, node_id, None)
    assert t1 is not None
    _, _, t2, _ = ember.get(inside.remote(), timeout=30)
    assert t2 is not None and t2 != t1

    who = Who.remote()
    j, t, actor_id = ember.get(who.ids.remote(), timeout=30)
    assert j == job_id
    assert actor_id is not None
    assert actor_id == who._actor_id.hex()
    assert t is not None
    ember.kill(who)
