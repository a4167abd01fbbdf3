"""The code every worker runs, laid out together in the zygote before it forks.

CPython 3.11 writes to a code object each time its function is called (the reference count
of the frame's code, the interpreter's warm-up counter in its bytecode), so every function a
forked worker runs copies the 4 KiB page its code object lies on. After the imports, the
~240 functions a worker runs to start, take an actor and answer a call lie on ~180 pages
among the code of everything else the modules define. ``compact`` gives each of them a
fresh copy of its code object, made one after the other so the copies share ~70 pages, and
keeps the originals alive so that their memory is not handed to a child's first objects.
An idle actor copies ~0.35 MiB less (docs/benchmarks-memory.md).

Which functions: ``hot_code_names.NAMES``, ``module:qualname`` each, written by
``scripts/hot_code.py`` from what traced workers ran
(``core_worker/memory_trace.hot_functions``); ``tests/test_hot_code.py`` fails when the list
no longer covers what a worker runs. A name the list has and the code lacks is skipped: the
list only decides where code lies, never what runs.
"""

from __future__ import annotations

import gc
import json
import types
from collections.abc import Iterable
from pathlib import Path

NAMES_FILE = Path(__file__).with_name("hot_code_names.py")


def load() -> set[str]:
    """The names the generated list holds (none if it is missing: the zygote forks as well
    without it, its children only copy more of its pages)."""
    try:
        from ember.raylet.hot_code_names import NAMES
    except ImportError:
        return set()
    return set(NAMES)


def write_names(names: Iterable[str], header: str) -> None:
    """Writes ``hot_code_names.py`` (a module, so that it ships wherever the code does)."""
    body = "".join(f"    {json.dumps(name)},\n" for name in sorted(names))
    NAMES_FILE.write_text(f"{header}\nNAMES: tuple[str, ...] = (\n{body})\n")


def compact(names: Iterable[str]) -> list[types.CodeType]:
    """Gives every function named in ``names`` (``module:qualname``, the module being its
    globals' ``__name__``) a fresh copy of its code, functions sharing a code object sharing
    the copy, and the named code of nested functions copied inside it. Returns the original
    code objects: the caller keeps them alive for the process's life."""
    wanted = set(names)
    if not wanted:
        return []
    copies: dict[int, types.CodeType] = {}
    originals: list[types.CodeType] = []

    def copy(code: types.CodeType, module: str) -> types.CodeType:
        done = copies.get(id(code))
        if done is not None:
            return done
        consts = tuple(
            copy(k, module) if type(k) is types.CodeType and _key(k, module) in wanted else k
            for k in code.co_consts
        )
        new = code.replace(co_consts=consts)
        copies[id(code)] = new
        originals.append(code)
        return new

    # Frozen objects (gc.freeze) are invisible to get_objects until thawed; the caller
    # freezes again once done.
    gc.unfreeze()
    functions = [o for o in gc.get_objects() if type(o) is types.FunctionType]
    # Copied in the list's order, so what runs together lies together.
    order = {name: i for i, name in enumerate(sorted(wanted))}
    hot = []
    for fn in functions:
        module = fn.__globals__.get("__name__", "")
        key = _key(fn.__code__, module)
        if key in wanted:
            hot.append((order[key], module, fn))
    hot.sort(key=lambda item: item[0])
    for _, module, fn in hot:
        fn.__code__ = copy(fn.__code__, module)
    return originals


def _key(code: types.CodeType, module: str) -> str:
    """A function's name in the list: ``module:qualname`` (as ``memory_trace`` writes it)."""
    return f"{module}:{code.co_qualname}"
