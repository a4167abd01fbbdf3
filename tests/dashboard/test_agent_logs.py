"""Log rotation under a follower (issue 4 §1 "rotation handled"): the dashboard's real
``LogFollower`` reads real files through the agent's real ``LogDir``; only the gRPC hop
between them is replaced by a direct call (``DirectHub``)."""

from __future__ import annotations

import asyncio
import os

from ember.agent.logs import LogDir, describe
from ember.dashboard.routes.logs import LogFollower

NODE = "ab" * 16


class DirectHub:
    """``AgentHub.call`` without the network: the op goes to the agent's ``LogDir`` as
    ``Agent.dispatch`` sends it."""

    def __init__(self, logs: LogDir) -> None:
        self.logs = logs

    async def call(self, node_id: str, op: str, body: dict, timeout: float) -> dict:
        if op == "log_tail":
            return self.logs.tail(body["name"], body["lines"])
        assert op == "log_read"
        return self.logs.read(
            body["name"], body["offset"], body["size"], body.get("file_id"), body.get("mark")
        )


def _drain(follower: LogFollower) -> tuple[list[str], list[str]]:
    """Polls until the follower has nothing more: (lines, other events)."""
    lines: list[str] = []
    events: list[str] = []

    async def run() -> None:
        for _ in range(100):
            out, more = await follower.poll()
            for event, data in out:
                if event == "lines":
                    lines.extend(data["lines"])
                else:
                    events.append(event)
            if not more and not out:
                return
        raise AssertionError("the follower never caught up")

    asyncio.run(run())
    return lines, events


def _append(path: str, lines: list[str]) -> None:
    with open(path, "a") as f:
        f.writelines(line + "\n" for line in lines)


def _start(tmp_path, name: str, chunk: int = 4096) -> tuple[LogFollower, list[str]]:
    follower = LogFollower(DirectHub(LogDir(str(tmp_path))), NODE, name, chunk=chunk)
    first = asyncio.run(follower.start(10))
    return follower, first


def test_rotation_by_rename_loses_no_line_when_the_new_file_outgrows_the_offset(tmp_path):
    live = tmp_path / "raylet.log"
    _append(live, ["old-1", "old-2"])
    follower, first = _start(tmp_path, "raylet.log")
    assert first == ["old-1", "old-2"]
    # Written after the follower's last read, then the file is renamed away (logrotate,
    # RotatingFileHandler) and a new one grows past the old offset before the next poll:
    # a size check alone sees a longer file and would skip the new file's first lines.
    _append(live, ["old-3"])
    os.rename(live, tmp_path / "raylet.log.1")
    _append(live, [f"new-{i}-" + "x" * 20 for i in range(5)])
    assert os.path.getsize(live) > follower.offset
    lines, events = _drain(follower)
    assert lines == ["old-3"] + [f"new-{i}-" + "x" * 20 for i in range(5)]
    assert events == ["rotated"]
    _append(live, ["after"])
    assert _drain(follower) == (["after"], [])


def test_rotation_by_truncation_loses_no_line_even_when_rewritten_past_the_offset(tmp_path):
    live = tmp_path / "worker-abc-123.err"
    _append(live, ["a-1", "a-2"])
    follower, _ = _start(tmp_path, "worker-abc-123.err")
    # copytruncate: the same inode, emptied, then written again past the old offset.
    with open(live, "r+") as f:
        f.truncate(0)
    _append(live, [f"b-{i}" for i in range(10)])
    lines, events = _drain(follower)
    assert lines == [f"b-{i}" for i in range(10)] and events == ["rotated"]
    # Truncated to below the offset, too.
    with open(live, "w") as f:
        f.write("c-1\n")
    assert _drain(follower) == (["c-1"], ["rotated"])


def test_a_large_rotated_remainder_is_read_in_bounded_chunks(tmp_path):
    live = tmp_path / "raylet.log"
    _append(live, ["start"])
    follower, _ = _start(tmp_path, "raylet.log", chunk=64)
    old = [f"old-{i:04d}" for i in range(200)]
    _append(live, old)
    os.rename(live, tmp_path / "raylet.log.1")
    _append(live, ["new"])
    lines, events = _drain(follower)
    assert lines == old + ["new"] and events == ["rotated"]


def test_a_deleted_file_is_missing_once_then_resumes(tmp_path):
    live = tmp_path / "gcs_server.log"
    _append(live, ["one"])
    follower, _ = _start(tmp_path, "gcs_server.log")
    os.unlink(live)
    lines, events = _drain(follower)
    assert lines == [] and events == ["missing"]
    assert _drain(follower) == ([], [])  # said once, not on every poll
    _append(live, ["two"])
    lines, events = _drain(follower)
    assert lines == ["two"] and events == ["resumed", "rotated"]


def test_a_line_without_its_newline_is_held_until_it_ends_or_the_file_goes_quiet(tmp_path):
    live = tmp_path / "raylet.log"
    _append(live, ["x"])
    follower, _ = _start(tmp_path, "raylet.log")
    with open(live, "a") as f:
        f.write("half")

    async def one() -> list:
        out, _ = await follower.poll()
        return out

    assert asyncio.run(one()) == []  # "half" is held: the rest may come
    with open(live, "a") as f:
        f.write(" and the rest\n")
    assert _drain(follower) == (["half and the rest"], [])


def test_rotated_files_are_indexed_as_their_live_file(tmp_path):
    for name in [
        "worker-abc123-4242.err",
        "worker-abc123-4242.err.1",
        "worker-abc123-4242.out.2",
        "raylet.log",
        "raylet.log.1",
        "raylet.log.2024-05-01",
        "raylet.log.2024-05-01_10-00-00",
        "raylet.log-20240501",
    ]:
        (tmp_path / name).write_text("x\n")
    index = {f["name"]: f for f in LogDir(str(tmp_path)).index()}
    err1 = index["worker-abc123-4242.err.1"]
    assert (err1["component"], err1["pid"], err1["worker_id"], err1["stream"]) == (
        "worker",
        4242,
        "abc123",
        "err",
    )
    assert err1["rotated"] == "1" and index["worker-abc123-4242.err"]["rotated"] is None
    assert index["worker-abc123-4242.out.2"]["pid"] == 4242
    for name, suffix in [
        ("raylet.log.1", "1"),
        ("raylet.log.2024-05-01", "2024-05-01"),
        ("raylet.log.2024-05-01_10-00-00", "2024-05-01_10-00-00"),
        ("raylet.log-20240501", "20240501"),
    ]:
        f = index[name]
        assert (f["component"], f["stream"], f["rotated"]) == ("raylet", "log", suffix), name
    assert describe("dashboard.log")["rotated"] is None
    assert describe("followed-by-test.log")["component"] == "followed-by-test"
