"""The raylet's log forwarder (``raylet/log_forwarder.py``) with real files and a fake
driver: new lines reach the driver, and a quiet file is looked at less and less often."""

from __future__ import annotations

import os
from types import SimpleNamespace

from ember.raylet import log_forwarder as lf


class Driver:
    closed = False

    def __init__(self) -> None:
        self.sent: list[dict] = []

    def send(self, op: str, body: dict) -> None:
        self.sent.append(body)


def test_quiet_files_are_looked_at_less_often_and_lines_still_arrive(tmp_path, monkeypatch):
    out, err = tmp_path / "w.out", tmp_path / "w.err"
    out.write_bytes(b"")
    err.write_bytes(b"")
    raylet = SimpleNamespace(args=SimpleNamespace(node_ip="127.0.0.1"))
    logs = lf.LogForwarder(raylet)
    driver = Driver()
    logs.add_driver(driver, None)
    worker = SimpleNamespace(
        log_paths=(str(out), str(err)), pid=7, title="", actor_id=None, job_id=None
    )
    logs.add_worker(worker)
    looks: list[str] = []
    getsize = os.path.getsize
    monkeypatch.setattr(lf.os.path, "getsize", lambda p: looks.append(p) or getsize(p))
    for _ in range(40):  # 4 s of quiet ticks
        logs._tick += 1
        logs.poll()
    # Every tick at first, then every 2, 4, 8, 10 ticks: far fewer than 40 looks per file.
    assert looks.count(str(out)) <= 10, looks.count(str(out))
    with open(out, "ab") as f:
        f.write(b"hello\n")
    for _ in range(lf.MAX_SKIP):  # within a second it is looked at again
        logs._tick += 1
        logs.poll()
    assert [b["lines"] for b in driver.sent] == [["hello"]]
    logs.worker_exited(worker)
    assert logs.files == {}
