"""Plain records: a class's annotated fields become its ``__slots__`` and an ``__init__``
(positional or by name, with defaults), as ``@dataclass(slots=True)`` gives, but the
``__init__`` is written when the class is first instantiated, not when it is defined.

Why: dataclasses writes each class's methods with ``exec`` as the module is imported, about
0.5 ms a class. The lease machine's events, the actor machine's, and the wire's catalogue
are modules of dozens of records each, imported by every process at start-up, most of them
never made in a given process; a record costs nothing until it is used.

Rules:
- A field is an annotation in the class body that is not ``ClassVar`` and not named in the
  class's ``_not_fields``; its value in the body, if any, is its default. A subclass has its
  parent's fields first, then its own.
- Equality compares the type and every field; records are unhashable, as dataclasses' are.
"""

from __future__ import annotations

from typing import Any, ClassVar


class RecordMeta(type):
    def __new__(mcls, name: str, bases: tuple, ns: dict[str, Any], **kw: Any) -> type:
        skip = frozenset(ns.get("_not_fields", ())).union(
            *(getattr(b, "_not_fields", ()) for b in bases)
        )
        own = tuple(
            f
            for f, hint in ns.get("__annotations__", {}).items()
            if f not in skip and not str(hint).startswith(("ClassVar", "typing.ClassVar"))
        )
        defaults = {f: ns.pop(f) for f in own if f in ns}
        ns["__slots__"] = own
        cls = super().__new__(mcls, name, bases, ns, **kw)
        inherited = [b for b in bases if isinstance(b, RecordMeta)]
        parent_fields = inherited[0]._fields if inherited else ()
        parent_defaults = inherited[0]._defaults if inherited else {}
        cls._fields = parent_fields + own
        cls._defaults = {**parent_defaults, **defaults}
        cls.__init__ = _first_init  # written on first use (see the module doc)
        return cls


def _first_init(self: Any, *args: Any, **kwargs: Any) -> None:
    cls = type(self)
    cls.__init__ = _write_init(cls)
    cls.__init__(self, *args, **kwargs)


def _write_init(cls: RecordMeta) -> Any:
    env: dict[str, Any] = {}
    params, assigns = [], []
    for f in cls._fields:
        if f in cls._defaults:
            env[f"_d_{f}"] = cls._defaults[f]
            params.append(f"{f}=_d_{f}")
        else:
            params.append(f)
        assigns.append(f"    self.{f} = {f}")
    source = f"def __init__(self, {', '.join(params)}):\n" + ("\n".join(assigns) or "    pass")
    exec(source, env)  # noqa: S102 - field names are identifiers the class declared
    return env["__init__"]


class Record(metaclass=RecordMeta):
    """The base of plain records (see the module doc)."""

    _not_fields: ClassVar[tuple[str, ...]] = ()
    _fields: ClassVar[tuple[str, ...]]
    _defaults: ClassVar[dict[str, Any]]

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and all(
            getattr(self, f) == getattr(other, f) for f in self._fields
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        shown = ", ".join(f"{f}={getattr(self, f, '?')!r}" for f in self._fields)
        return f"{type(self).__name__}({shown})"
