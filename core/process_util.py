"""Process plumbing shared by the GCS, raylet and workers: readiness, parent death, logs."""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
from typing import Any

PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int, sig: int = signal.SIGTERM) -> None:
    """Asks Linux to signal us when our parent dies, so a SIGKILLed driver leaves no orphans."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, sig)
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


LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s %(process)d: %(message)s"


def setup_process_logging(path: str, level: int = logging.INFO) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    logging.basicConfig(filename=path, level=level, format=LOG_FORMAT)
    from ember import config

    config.apply_logging_level()  # ember.init(logging_level=...) reaches the node's processes
    log = logging.getLogger("ember")
    log.debug("logging to %s at level %s", path, logging.getLevelName(log.getEffectiveLevel()))
    sys.excepthook = lambda t, v, tb: logging.getLogger("ember").critical(
        "uncaught exception", exc_info=(t, v, tb)
    )


def log_to_own_file(logger_name: str, path: str) -> None:
    """Sends ``logger_name``'s records to ``path`` instead of the process's log: a component
    that runs inside another's process (the head's agent in the dashboard's) keeps its own
    log file, where ``ember logs`` and the log index look for it."""
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    log = logging.getLogger(logger_name)
    log.addHandler(handler)
    log.propagate = False
