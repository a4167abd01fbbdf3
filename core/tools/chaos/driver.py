"""The chaos suite's drivers, each a process of its own so the suite can watch it end (or kill
it) like a user's program:

    python -m ember.tools.chaos.driver MODE GCS_ADDRESS TEMP_DIR FAR_NODE_HEX [ARG]

Modes: ``load`` (the workload faults are injected under), ``probe`` (does the cluster still
serve?), ``exit``/``shutdown``/``raise``/``sigkill`` (hold large objects on both nodes, then
end that way), ``hog`` (a task the memory monitor must kill) and ``chain`` (a deep chain of
refs, then a ref nobody owns). Each speaks one word per line on stdout (READY, ITER, OK ...)
and reads its cue from stdin; any failure is an ``ERROR`` line and exit status 1.
"""

from __future__ import annotations

import gc
import os
import sys
import threading
import time
import traceback

import ember
import numpy as np
from ember import global_state
from ember.exceptions import (
    ActorDiedError,
    EmberError,
    ObjectUnknownOwnerError,
    OutOfMemoryError,
)
from ember.ids import OBJECT_ID_SIZE
from ember.util.scheduling_strategies import NodeAffinitySchedulingStrategy

MIB = 1024 * 1024
BIG = 8 * MIB  # the load's objects: past the inline limit, so they live in the stores
HELD_SIZE = 16 * MIB  # each object an ending driver holds (3 or more per node)
TIMEOUT = 60.0  # every get of a driver; the suite's own deadlines are longer
HELD: list = []  # module level: still referenced when the interpreter exits


def say(*words: object) -> None:
    print(*words, flush=True)


def far(node_hex: str, soft: bool) -> NodeAffinitySchedulingStrategy:
    return NodeAffinitySchedulingStrategy(node_hex, soft=soft)


@ember.remote(max_retries=5)
def square(x: int) -> int:
    time.sleep(0.05)  # long enough to be running when a worker is killed
    return x * x


@ember.remote(max_retries=5)
def checksum(a: np.ndarray) -> int:
    return int(a.sum(dtype=np.int64))


@ember.remote(max_retries=5)
def make(n: int, fill: int) -> np.ndarray:
    return np.full(n, fill, dtype=np.uint8)


@ember.remote(num_cpus=0)
class Counter:
    def __init__(self) -> None:
        self.n = 0

    def pid(self) -> int:
        return os.getpid()

    def add(self, k: int) -> int:
        self.n += k
        return self.n


def _stop_cue() -> threading.Event:
    """Set once a line (or the end) arrives on stdin: the suite's "stop now"."""
    cue = threading.Event()

    def read() -> None:
        sys.stdin.readline()
        cue.set()

    threading.Thread(target=read, daemon=True).start()
    return cue


def load(far_hex: str, fragile: bool) -> None:
    """Tasks with retries, a restartable actor (and with ``fragile`` one that is not), large
    puts and gets across the two nodes, round after round until stdin says stop."""
    keeper = Counter.options(
        max_restarts=-1, max_task_retries=-1, scheduling_strategy=far(far_hex, True)
    ).remote()
    words = [f"actor_pid={ember.get(keeper.pid.remote(), timeout=TIMEOUT)}"]
    weak = None
    if fragile:
        weak = Counter.options(max_restarts=0, scheduling_strategy=far(far_hex, True)).remote()
        words.append(f"fragile_pid={ember.get(weak.pid.remote(), timeout=TIMEOUT)}")
    say("READY", *words)
    cue = _stop_cue()
    rounds = 0
    while not cue.is_set():
        xs = list(range(8))
        squares = [square.options(scheduling_strategy="SPREAD").remote(x) for x in xs]
        assert ember.get(squares, timeout=TIMEOUT) == [x * x for x in xs]
        # A restarted actor starts again from 0: any positive count is right.
        assert ember.get(keeper.add.remote(1), timeout=TIMEOUT) >= 1
        big = ember.put(np.full(BIG, 1, dtype=np.uint8))
        sums = [checksum.options(scheduling_strategy="SPREAD").remote(big) for _ in range(2)]
        assert ember.get(sums, timeout=TIMEOUT) == [BIG, BIG]
        there = make.options(scheduling_strategy=far(far_hex, True)).remote(BIG, 2)
        assert int(ember.get(there, timeout=TIMEOUT)[-1]) == 2
        del big, there
        rounds += 1
        say("ITER", rounds)
    if weak is not None:
        # The suite killed it: a call must fail with ActorDiedError, not hang or succeed.
        try:
            ember.get(weak.add.remote(1), timeout=TIMEOUT)
            say("ERROR the killed actor without restarts still answered")
            sys.exit(1)
        except ActorDiedError:
            say("FRAGILE_DIED")
    say("DONE", rounds)


def probe(far_hex: str, head_hex: str) -> None:
    """Tasks on each node, a new actor, a large object each way: all correct."""
    for node in (head_hex, far_hex):
        here = far(node, False)
        assert ember.get(square.options(scheduling_strategy=here).remote(7), timeout=TIMEOUT) == 49
        made = make.options(scheduling_strategy=here).remote(BIG, 3)
        assert int(ember.get(made, timeout=TIMEOUT)[0]) == 3
        big = ember.put(np.full(BIG, 1, dtype=np.uint8))
        assert ember.get(checksum.options(scheduling_strategy=here).remote(big)) == BIG
    counter = Counter.options(max_restarts=0).remote()
    assert ember.get([counter.add.remote(1) for _ in range(3)], timeout=TIMEOUT) == [1, 2, 3]
    ember.kill(counter)
    say("OK")


def hold(mode: str, far_hex: str) -> None:
    """Large objects on both nodes (puts here, one pulled there, a result fetched here, one
    left there), then the end ``mode`` names, still holding them."""
    there = far(far_hex, False)
    a = ember.put(np.full(HELD_SIZE, 1, dtype=np.uint8))
    b = ember.put(np.full(HELD_SIZE, 2, dtype=np.uint8))
    fetched = make.options(scheduling_strategy=there).remote(HELD_SIZE, 3)
    assert int(ember.get(fetched, timeout=TIMEOUT)[0]) == 3
    left = make.options(scheduling_strategy=there).remote(HELD_SIZE, 4)
    ember.wait([left], timeout=TIMEOUT, fetch_local=False)
    assert ember.get(checksum.options(scheduling_strategy=there).remote(a)) == HELD_SIZE
    HELD.extend([a, b, fetched, left])
    say("READY")
    if mode == "sigkill":
        time.sleep(600)  # until the suite's SIGKILL
    sys.stdin.readline()
    if mode == "shutdown":
        ember.shutdown()
        say("SHUT_DOWN")
        sys.stdin.read()  # alive, without a core worker, until the suite closes stdin
    elif mode == "raise":
        raise RuntimeError("the chaos driver crashes still holding its objects")


@ember.remote(max_retries=0)
def hog(pid_file: str, gate: str) -> int:
    ballast = bytearray(32 * MIB)  # some real memory; the usage the monitor reads is the hook's
    with open(pid_file, "w") as f:
        f.write(str(os.getpid()))
    deadline = time.monotonic() + 120
    while not os.path.exists(gate) and time.monotonic() < deadline:
        time.sleep(0.05)
    return len(ballast)


def run_hog(far_hex: str, work_dir: str) -> None:
    """The hog must fail with OutOfMemoryError (the suite raises the node's usage once it
    runs), then the node must take new work."""
    pid_file, gate = os.path.join(work_dir, "hog.pid"), os.path.join(work_dir, "hog.gate")
    ref = hog.options(scheduling_strategy=far(far_hex, False)).remote(pid_file, gate)
    try:
        ember.get(ref, timeout=120)
        say("ERROR the hog was not killed")
        sys.exit(1)
    except OutOfMemoryError:
        say("OOM_RAISED")
    after = square.options(scheduling_strategy=far(far_hex, False)).remote(5)
    assert ember.get(after, timeout=TIMEOUT) == 25
    say("OK")


def chain() -> None:
    """``r = put([r])`` 10,000 times, then drop ``r``: released without error. Then ``get``
    of a ref nobody owns must raise at once, not wait for its timeout."""
    refs = global_state.worker.refs
    before = len(refs)
    r = ember.put(0)
    for _ in range(10_000):
        r = ember.put([r])
    del r
    gc.collect()
    assert ember.get(ember.put("after"), timeout=TIMEOUT) == "after"  # releases flush here
    deadline = time.monotonic() + TIMEOUT
    while len(refs) > before:
        if time.monotonic() > deadline:
            say(f"ERROR {len(refs) - before} refs of the chain still held after {TIMEOUT:g} s")
            sys.exit(1)
        ember.get(ember.put(0), timeout=TIMEOUT)  # the next call releases the next batch
        time.sleep(0.05)
    say("CHAIN_RELEASED")
    started = time.monotonic()
    try:
        ember.get(ember.ObjectRef(os.urandom(OBJECT_ID_SIZE)), timeout=TIMEOUT)
        say("ERROR get of an unowned ref returned")
        sys.exit(1)
    except ObjectUnknownOwnerError:
        took = time.monotonic() - started
    if took > 5:
        say(f"ERROR get of an unowned ref took {took:.1f} s to raise")
        sys.exit(1)
    say("UNOWNED_RAISED", f"{took:.3f}")
    say("OK")


def main(argv: list[str]) -> None:
    mode, address, temp_dir, far_hex = argv[:4]
    extra = argv[4] if len(argv) > 4 else ""
    ember.init(address=address, temp_dir=temp_dir, namespace="chaos", log_to_driver=False)
    try:
        if mode == "load":
            load(far_hex, fragile=extra == "fragile")
        elif mode == "probe":
            probe(far_hex, extra)
        elif mode in ("exit", "shutdown", "raise", "sigkill"):
            hold(mode, far_hex)
        elif mode == "hog":
            run_hog(far_hex, extra)
        elif mode == "chain":
            chain()
        else:
            raise SystemExit(f"unknown mode {mode!r}")
    except (AssertionError, EmberError, TimeoutError) as e:
        say("ERROR", f"{type(e).__name__}: {e}".replace("\n", " | ")[:2000])
        traceback.print_exc()
        sys.exit(1)


if __name__ == "__main__":
    main(sys.argv[1:])
