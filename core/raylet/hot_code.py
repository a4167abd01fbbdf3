"""The code every worker runs, laid out together in the zygote before it forks.

CPython 3.11 writes to a code object each time its function is called (the reference count
of the frame's code, the interpreter's warm-up counter in its bytecode), so every function a
forked worker runs copies the 4 KiB page its code object lies on. After the imports, the
~240 functions a worker runs to start, take an actor and answer a call lie on ~180 pages
among the code of everything else the modules define. ``compact`` gives each of them a
fresh copy of its code object, made one after the other so the copies share ~70 pages, and
keeps the originals alive so that their memory is not handed to a child's first objects.
An idle actor copies ~0.35 MiB less (docs/benchmarks-memory.md).

The function objects too: a call writes the function's reference count (its frame holds
it), and so does a bound method for as long as it lives (a worker's handler tables), so the
~300 functions a worker runs or binds copied ~80 pages, scattered among the functions of
everything else. Each gets a twin, made one after the other (~12 pages for all), which takes
its place wherever the collector sees a reference to it; ~0.1 MiB less per idle actor.

Which functions: ``hot_code_names.NAMES``, ``module:qualname`` each, written by
``scripts/hot_code.py`` from what traced workers ran or bound
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
    # The function objects next, one after the other: a call writes its function's
    # reference count too (the frame holds it), so scattered functions copy a page each.
    owners = _class_dicts()
    for _, _, fn in hot:
        twin = _twin(fn)
        _rebind(fn, twin, owners)
        originals.append(fn)  # kept: its freed block would take a child's first object
    return originals


def _twin(fn: types.FunctionType) -> types.FunctionType:
    """A new function object that is ``fn`` in every attribute: code, globals, defaults,
    closure, names, annotations, and the same ``__dict__`` (what decorators set on it)."""
    twin = types.FunctionType(
        fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__
    )
    twin.__kwdefaults__ = fn.__kwdefaults__
    twin.__qualname__ = fn.__qualname__
    twin.__module__ = fn.__module__
    twin.__doc__ = fn.__doc__
    twin.__annotations__ = fn.__annotations__
    twin.__dict__ = fn.__dict__
    return twin


def _class_dicts() -> dict[int, type]:
    """{id of a class's own dict: the class}: the dict a class's methods lie in, which only
    ``setattr`` on the class may change (it keeps the interpreter's method caches true)."""
    out: dict[int, type] = {}
    for obj in gc.get_objects():
        if isinstance(obj, type):
            for ref in gc.get_referents(obj):
                if type(ref) is dict and ref.keys() == obj.__dict__.keys():
                    out[id(ref)] = obj
    return out


def _rebind(old: object, new: object, owners: dict[int, type]) -> None:
    """Points every reference to ``old`` the collector can see at ``new``: values of dicts
    (modules' globals, classes' attributes, instances', registries'), items of lists,
    cells (a decorator's wrapped function), and the ``staticmethod`` or ``classmethod``
    holding it (a new one, rebound the same way). What holds it otherwise (a tuple, a bound
    method made before, C code) keeps the old object, which works the same."""
    # No comprehension or nested function here may name ``old``: that would make it a cell
    # of this frame, one of its own referrers, which the loop would point at ``new``.
    for ref in gc.get_referrers(old):
        kind = type(ref)
        if kind is dict:
            owner = owners.get(id(ref))
            keys = []
            for key, value in ref.items():
                if value is old:
                    keys.append(key)
            for key in keys:
                if owner is not None:
                    setattr(owner, key, new)
                else:
                    ref[key] = new
        elif kind is list:
            for i, item in enumerate(ref):
                if item is old:
                    ref[i] = new
        elif kind is types.CellType:
            ref.cell_contents = new
        elif kind is staticmethod or kind is classmethod:
            wrapper = kind(new)
            wrapper.__dict__.update(ref.__dict__)
            _rebind(ref, wrapper, owners)


def _key(code: types.CodeType, module: str) -> str:
    """A function's name in the list: ``module:qualname`` (as ``memory_trace`` writes it)."""
    return f"{module}:{code.co_qualname}"
