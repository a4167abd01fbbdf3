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

from ember.raylet import hot_code
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
