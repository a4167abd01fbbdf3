"""Process plumbing shared by the GCS, raylet and workers: readiness, parent death, logs."""

from __future__ import annotations

import ctypes
import logging
import os
import select
import signal
import subprocess
import sys
import time
from typing import Any

from ember import config

PR_SET_PDEATHSIG = 1


_libc: ctypes.CDLL | None = None  # loaded once: a forked worker reuses the zygote's


def die_with_parent(parent_pid: int, sig: int = signal.SIGTERM) -> None:
    """Asks Linux to signal us when our parent dies, so a SIGKILLed driver leaves no orphans."""
    global _libc
    try:
        if _libc is None:
            _libc = ctypes.CDLL("libc.so.6", use_errno=True)
        _libc.prctl(PR_SET_PDEATHSIG, sig)
    except OSError:
        pass
    # The parent may have died before prctl took effect.
    if parent_pid and os.getppid() != parent_pid:
        os.kill(os.getpid(), sig)


def signal_ready(fd: int, message: str) -> None:
    """Tells the process that started us we are serving (one line on an inherited pipe)."""
    release_startup_memory()
    if fd < 0:
        return
    try:
        os.write(fd, (message + "\n").encode())
    finally:
        os.close(fd)


def release_startup_memory(collect: bool = True) -> None:
    """Gives the C heap's free pages back to the OS: start-up (imports, parsing, building
    tables) frees memory that glibc otherwise keeps mapped, which shows as resident memory
    for the process's whole life (the idle node's resident memory is a benchmark row). ``collect``
    first runs a full garbage collection (not in a user's driver, whose heap may be big)."""
    import gc

    if collect:
        gc.collect()
    trim_heap()


def trim_heap() -> None:
    """glibc's malloc_trim(0): the C heap's free pages back to the OS (a no-op elsewhere)."""
    global _malloc_trim
    if _malloc_trim is None:
        import ctypes

        try:
            _malloc_trim = ctypes.CDLL("libc.so.6").malloc_trim
        except (OSError, AttributeError):  # not glibc: nothing to give back this way
            _malloc_trim = False
    if _malloc_trim:
        _malloc_trim(0)


_malloc_trim: Any = None  # libc's malloc_trim once looked up; False where there is none


def setup_process_logging(path: str, level: int = logging.INFO) -> None:
    """The process's log records (its own and its libraries') to ``path``, as text or one
    JSON object a line (``EMBER_LOG_FORMAT=json``: ``ember.log_format``); the component is
    the file's name (``raylet.log``: raylet)."""
    from ember.log_format import component_of, formatter

    os.makedirs(os.path.dirname(path), exist_ok=True)
    handler = logging.FileHandler(path)
    handler.setFormatter(formatter(component_of(path)))
    logging.basicConfig(handlers=[handler], level=level)
    from ember import config

    config.apply_logging_level()  # ember.init(logging_level=...) reaches the node's processes
    log = logging.getLogger("ember")
    # One line at start, whatever else follows: which process this file is, at what level.
    log.info(
        "%s started (pid %d), logging at %s",
        component_of(path),
        os.getpid(),
        logging.getLevelName(log.getEffectiveLevel()),
    )
    sys.excepthook = lambda t, v, tb: logging.getLogger("ember").critical(
        "uncaught exception", exc_info=(t, v, tb)
    )


def log_to_own_file(logger_name: str, path: str) -> None:
    """Sends ``logger_name``'s records to ``path`` instead of the process's log: a component
    that runs inside another's process (the head's agent in the dashboard's) keeps its own
    log file, where ``ember logs`` and the log index look for it."""
    from ember.log_format import component_of, formatter

    handler = logging.FileHandler(path)
    handler.setFormatter(formatter(component_of(path)))
    log = logging.getLogger(logger_name)
    log.addHandler(handler)
    log.propagate = False
    log.info("%s started in process %d", component_of(path), os.getpid())


def wait_ready_line(name: str, proc: subprocess.Popen, fd: int, deadline: float, logs: str) -> str:
    """The ready line ``proc`` writes on ``fd`` (closed after); raises, quoting the end of its
    ``<logs>/<name>.err`` (or ``.log``), if it exits first or stays silent past ``deadline``.
    Blocking: the raylet calls it from a thread for the agent."""
    buf = b""
    try:
        while b"\n" not in buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(
                    f"the {name} process did not start within "
                    f"{config.process_start_timeout:.0f} s; see {logs}/{name}.err"
                )
            ready, _, _ = select.select([fd], [], [], min(left, 0.5))
            if ready:
                chunk = os.read(fd, 4096)
                if not chunk:
                    break
                buf += chunk
            elif proc.poll() is not None:
                break
    finally:
        os.close(fd)
    if b"\n" not in buf:
        try:
            code = proc.wait(1.0)  # its pipe closed: it is exiting
        except subprocess.TimeoutExpired:
            code = None
        # Uncaught errors go to the process's log (its excepthook), the rest to .err.
        tail = _tail(os.path.join(logs, f"{name}.err")) or _tail(
            os.path.join(logs, f"{name}.log"), 3
        )
        raise RuntimeError(f"the {name} process exited during start-up (code {code}).\n{tail}")
    return buf.decode().strip()


def _tail(path: str, n: int = 20) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""
