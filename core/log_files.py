"""Opening a file of a session's log directory for someone else to read, never following a
link out of it.

Anything a job runs can write to its session's ``logs/`` directory, so a name found there
proves nothing: a symbolic link ``x.log -> /etc/passwd`` (or to the session's
``cluster_token``), a hard link to the token, or a FIFO that blocks the reader forever.
Every reader that serves a log to a user (the agent's tail, read and search, and so the
dashboard's log, download and job-log endpoints) opens it here:

- the name is one plain component (no separator, not hidden, not ``..``);
- the directory is opened without following a link in its last component, and the file
  relative to it with ``O_NOFOLLOW``, so a link is refused by the kernel itself, with no
  window between a check and the open;
- what was opened must be a regular file with no other name (``st_nlink == 1``: a hard link
  to a file elsewhere is that file).

A refusal is ``LogFileRefused`` (a ``PermissionError``; HTTP 403), a missing file
``FileNotFoundError`` (404).
"""

from __future__ import annotations

import errno
import os
import stat
from typing import BinaryIO

REFUSED_STATUS = 403  # what an HTTP endpoint answers for LogFileRefused


class LogFileRefused(PermissionError):
    """The name is in the log directory but is not a log file Ember will serve."""


def check_name(name: str) -> None:
    """Raises ``FileNotFoundError`` unless ``name`` is one plain file name."""
    if not name or os.sep in name or "\0" in name or name.startswith("."):
        raise FileNotFoundError(f"{name!r} is not a log file name")


def open_log(directory: str, name: str) -> BinaryIO:
    """``directory/name`` opened for binary reading, if it is a regular file of that very
    directory (see the module doc); else ``LogFileRefused`` or ``FileNotFoundError``."""
    check_name(name)
    flags = os.O_RDONLY | os.O_CLOEXEC
    try:
        dir_fd = os.open(directory, flags | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            raise LogFileRefused(
                f"the log directory {directory} is a link or not a directory: not served"
            ) from None
        raise
    try:
        # O_NONBLOCK: opening a FIFO for reading would wait for a writer.
        fd = os.open(name, flags | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise LogFileRefused(
                f"{name} is a symbolic link; only regular files of the session's logs "
                "directory are served"
            ) from None
        raise
    finally:
        os.close(dir_fd)
    try:
        _check_opened(name, os.fstat(fd))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _check_opened(name: str, st: os.stat_result) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise LogFileRefused(f"{name} is not a regular file; only log files are served")
    if st.st_nlink != 1:
        raise LogFileRefused(
            f"{name} has other names (a hard link, {st.st_nlink} names): not served, since "
            "it may be a file from outside the logs directory"
        )


def is_servable(entry: os.DirEntry) -> bool:
    """For an index of the directory: a regular file that is not a link (``open_log`` would
    serve it, unless it changes in between; ``open_log`` decides)."""
    try:
        if not entry.is_file(follow_symlinks=False):
            return False
        return entry.stat(follow_symlinks=False).st_nlink == 1
    except OSError:
        return False


__all__ = ["REFUSED_STATUS", "LogFileRefused", "check_name", "is_servable", "open_log"]
