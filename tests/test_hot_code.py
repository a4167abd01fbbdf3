"""The zygote's hot code: the functions it lays out together keep working, share their copy,
take their nested functions' code with them, and the generated list still names what a
forked worker runs (``scripts/hot_code.py --check`` against a traced node)."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import types
from pathlib import Path

from ember.raylet import hot_code, zygote_heap
from ember_test_utils import assert_no_ember_children

ROOT = Path(__file__).resolve().parent.parent

SOURCE = textwrap.dedent(
    """
    import functools

    def logged(fn):
        @functools.wraps(fn)
        def run(*args):
            return ("logged", fn(*args))
        return run

    class Counter:
        def __init__(self):
            self.n = 0

        @logged
        def add(self, k):
            self.n += k
            return self.n

        @logged
        def sub(self, k):
            self.n -= k
            return self.n

        def adder(self, k):
            def add_k(x):
                return x + k
            return add_k

    def cold(x):
        return x * 2

    def hot(x):
        return x + 1

    class Tools:
        @staticmethod
        def double(x):
            return 2 * x

        @classmethod
        def name(cls):
            return cls.__name__

    HANDLERS = [hot]
    TABLE = {"hot": hot}
    FROZEN = (hot,)

    def call_hot_later():
        return hot(1)
    """
)


def _module(name: str) -> types.ModuleType:
    mod = types.ModuleType(name)
    exec(compile(SOURCE, f"<{name}>", "exec"), mod.__dict__)
    return mod


def test_named_functions_get_a_shared_copy_of_their_code_and_still_work():
    mod = _module("hot_code_sample")
    counter = mod.Counter()
    add_code = mod.Counter.add.__code__  # logged.<locals>.run, shared by add and sub
    sub_code = mod.Counter.sub.__code__
    adder_code = mod.Counter.adder.__code__
    cold_code = mod.cold.__code__
    assert add_code is sub_code
    nested = next(k for k in adder_code.co_consts if isinstance(k, types.CodeType))
    originals = hot_code.compact(
        [
            "hot_code_sample:logged.<locals>.run",
            "hot_code_sample:Counter.adder",
            "hot_code_sample:Counter.adder.<locals>.add_k",
            "hot_code_sample:gone_since",  # named, no longer defined: skipped
        ]
    )
    gc.freeze()  # as the zygote does after compacting (compact thaws to find functions)
    try:
        # Copies, equal in what they run, not the objects the module made.
        assert mod.Counter.add.__code__ is not add_code
        assert mod.Counter.add.__code__ == add_code
        assert mod.Counter.add.__code__ is mod.Counter.sub.__code__, "one copy, shared"
        assert mod.Counter.adder.__code__ is not adder_code
        assert mod.cold.__code__ is cold_code, "an unnamed function keeps its code"
        new_nested = next(
            k for k in mod.Counter.adder.__code__.co_consts if isinstance(k, types.CodeType)
        )
        assert new_nested is not nested and new_nested == nested
        # The originals are handed back to be kept alive, each once.
        assert {id(c) for c in originals} >= {id(add_code), id(adder_code), id(nested)}
        assert len(originals) == len({id(c) for c in originals})
        # And everything behaves as before.
        assert counter.add(5) == ("logged", 5)
        assert counter.sub(2) == ("logged", 3)
        add_three = counter.adder(3)
        assert add_three.__code__ is new_nested
        assert add_three(4) == 7
        assert mod.cold(21) == 42
    finally:
        gc.unfreeze()


def test_named_functions_become_new_objects_side_by_side_wherever_they_are_held():
    """A call writes its function object's reference count, so the zygote lays the hot
    functions' objects out together too: each gets a twin, and every reference the collector
    can reach (module, class, list, dict, a decorator's cell, a static or class method)
    points at it; the rest keep the old object, which works the same."""
    mod = _module("hot_code_twins")
    old_hot = mod.hot
    old_hot_code = old_hot.__code__
    old_inner_add = mod.Counter.add.__wrapped__  # Counter.add, held by the decorator's cell
    old_double = mod.Tools.__dict__["double"].__func__
    old_name = mod.Tools.__dict__["name"].__func__
    counter = mod.Counter()
    bound_before = counter.adder  # a bound method made before: keeps its function
    # Holes where functions were freed, one every 40 blocks (a page holds 23), as a busy
    # heap has: the zygote fills every hole before it compacts (zygote_heap), so the twins
    # still lie side by side past the fillers.
    made = [types.FunctionType(old_hot_code, {}) for _ in range(4000)]
    del made[::40]
    fillers = zygote_heap.fill_free_blocks()
    originals = hot_code.compact(
        [
            "hot_code_twins:hot",
            "hot_code_twins:Counter.add",
            "hot_code_twins:Counter.adder",
            "hot_code_twins:Tools.double",
            "hot_code_twins:Tools.name",
        ]
    )
    gc.freeze()
    try:
        twin = mod.hot
        assert twin is not old_hot and twin.__code__ is not old_hot_code
        assert (twin.__name__, twin.__qualname__, twin.__module__) == (
            "hot",
            "hot",
            "hot_code_twins",
        )
        assert twin.__globals__ is mod.__dict__
        # Every holder the collector sees now holds the twin, so identity still agrees.
        assert mod.HANDLERS[0] is twin and mod.TABLE["hot"] is twin
        assert mod.call_hot_later() == 2 and twin(41) == 42
        assert mod.FROZEN[0] is old_hot, "a tuple cannot change: it keeps the old object"
        assert old_hot(41) == 42
        # The decorated method's inner function, held in the decorator's closure cell.
        new_inner = mod.Counter.add.__wrapped__
        assert new_inner is not old_inner_add
        assert mod.Counter.add.__closure__[0].cell_contents is new_inner
        assert counter.add(5) == ("logged", 5)
        # Static and class methods: new wrappers around the twins.
        assert mod.Tools.__dict__["double"].__func__ is not old_double
        assert mod.Tools.double(21) == 42 and mod.Tools().double(4) == 8
        assert mod.Tools.__dict__["name"].__func__ is not old_name
        assert mod.Tools.name() == "Tools"
        assert bound_before.__func__ is not mod.Counter.__dict__["adder"]
        assert bound_before(2)(3) == 5 and counter.adder(2)(3) == 5
        # The old objects are handed back to be kept (a freed block would take a child's
        # first object), each once.
        kept = {id(o) for o in originals}
        assert {id(old_hot), id(old_inner_add), id(old_double), id(old_name)} <= kept
        assert len(originals) == len(kept)
        # The twins lie together: consecutive blocks, on no more than two pages (a pool
        # of the allocator's may end among them).
        twins = [
            mod.hot,
            new_inner,
            mod.Counter.__dict__["adder"],
            mod.Tools.__dict__["double"].__func__,
            mod.Tools.__dict__["name"].__func__,
        ]
        assert len({id(f) >> 12 for f in twins}) <= 2, sorted(map(id, twins))
    finally:
        gc.unfreeze()
        del fillers  # held until here: freed, they are holes the twins would have taken


def test_nothing_named_nothing_copied():
    mod = _module("hot_code_empty")
    code = mod.cold.__code__
    assert hot_code.compact([]) == []
    assert mod.cold.__code__ is code


def test_the_generated_list_covers_what_a_forked_worker_runs():
    """Fails when the worker's hot path moved on since ``hot_code_names.py`` was written:
    the message says which functions are missing and the command that rewrites it."""
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "hot_code.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    assert "the list names" in out.stdout
    assert_no_ember_children()
