"""A driver SIGKILLed with its node up cannot remove its node's arena from /dev/shm (the
processes that could are killed with it); the next node started on the machine removes it,
and never an arena whose maker lives or that a running raylet maps."""

from __future__ import annotations

import glob
import os
import subprocess

import ember
import psutil
import pytest
from ember.session_processes import find_ember_processes, sweep_orphan_arenas
from ember_test_utils import (
    assert_no_ember_children,
    head_cluster,
    process_gone,
    sigkill_driver_when_ready,
    wait_until,
)

pytestmark = pytest.mark.timeout(180)

DRIVER = """
import ember
ember.init(num_cpus=1, include_dashboard=False)
print("ready", flush=True)
import time
time.sleep(600)
"""


def _raylets_mapping(path: str) -> list[psutil.Process]:
    out = []
    for p in find_ember_processes(None):
        try:
            if path in p.cmdline():
                out.append(p)
        except psutil.Error:
            continue
    return out


def test_a_killed_nodes_arena_is_removed_by_the_next_node_started():
    """A driver and its raylet SIGKILLed together (the OOM killer, a ``kill -9`` of the
    process group): the raylet removes its arena when it stops, and the driver when it shuts
    its node down; killed, neither can."""
    if ember.is_initialized():
        ember.shutdown()
    seen: dict[str, str] = {}

    def kill_its_raylet_first() -> None:
        (driver,) = [p for p in psutil.Process().children() if "ember" in " ".join(p.cmdline())]
        (raylet,) = [p for p in driver.children() if "ember.raylet.raylet" in " ".join(p.cmdline())]
        cmd = raylet.cmdline()
        seen["arena"] = cmd[cmd.index("--arena-path") + 1]
        assert os.path.exists(seen["arena"])
        driver.suspend()  # it would remove the arena itself on seeing its raylet die
        raylet.kill()
        wait_until(lambda: process_gone(raylet.pid), 30, 0.05, "the raylet killed")

    sigkill_driver_when_ready(DRIVER, [], "ready", check=kill_its_raylet_first)
    arena = seen["arena"]
    wait_until(lambda: not _raylets_mapping(arena), 30, 0.1, "the killed node's processes gone")
    assert os.path.exists(arena), "the fault left the arena behind"

    # An arena whose maker lives (this process: no node of ours uses it) is not an orphan.
    alive_maker = f"/dev/shm/ember-{os.getpid()}-{os.urandom(6).hex()}"
    open(alive_maker, "wb").close()
    try:
        ember.init(num_cpus=1, include_dashboard=False)
        try:
            assert not os.path.exists(arena), "the next node removed the orphan"
            assert os.path.exists(alive_maker)
            own = glob.glob(f"/dev/shm/ember-{os.getpid()}-*")
            assert len(own) == 2, own  # its own arena, and the one made above
            # A sweep meanwhile leaves the running node's arena alone.
            assert sweep_orphan_arenas() == []
            assert ember.get(ember.put(b"x" * 200_000)) == b"x" * 200_000
        finally:
            ember.shutdown()
    finally:
        os.unlink(alive_maker)
    assert_no_ember_children()


def test_an_arena_a_running_raylet_maps_is_kept_though_its_maker_is_gone():
    """``ember start`` exits once its node runs: the arena's maker is gone, its raylet is
    not, and the arena is the node's object store."""
    with head_cluster("--include-dashboard", "false") as (root, _port, _result):
        raylets = [
            p for p in find_ember_processes(root) if "ember.raylet.raylet" in " ".join(p.cmdline())
        ]
        assert len(raylets) == 1
        cmd = raylets[0].cmdline()
        arena = cmd[cmd.index("--arena-path") + 1]
        maker = int(os.path.basename(arena).split("-")[1])
        wait_until(lambda: not psutil.pid_exists(maker), 30, 0.1, "ember start's process gone")
        assert sweep_orphan_arenas() == []
        assert os.path.exists(arena)


def test_an_arena_someone_holds_is_kept_though_its_maker_is_gone():
    """A raylet in another PID namespace (a container sharing /dev/shm) is not in this
    one's process list; its lock on the file is what keeps its arena."""
    from ember.object_store.arena import hold_arena_file

    gone = subprocess.Popen(["true"])
    gone.wait()
    held = f"/dev/shm/ember-{gone.pid}-{os.urandom(6).hex()}"
    unheld = f"/dev/shm/ember-{gone.pid}-{os.urandom(6).hex()}"
    for path in (held, unheld):
        open(path, "wb").close()
    fd = hold_arena_file(held)
    try:
        removed = sweep_orphan_arenas()  # other tests' orphans may go too
        assert unheld in removed and held not in removed
        assert os.path.exists(held) and not os.path.exists(unheld)
    finally:
        os.close(fd)
        os.unlink(held)
