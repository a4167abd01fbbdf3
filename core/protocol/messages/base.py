"""What a catalogued message is: one class per op, its fields declared as annotations.

A message class says, for a reader, what one op carries and answers::

    class KvGet(GcsMessage):
        '''A value of the GCS's key-value store.'''

        op = "kv_get"
        sent_by = "drivers, the CLI, the dashboard"
        reply = "bytes | None"

        key: bytes
        namespace: str = OMIT

and, for the wire, travels as today's ``op`` and body: ``conn.call(KvGet(key=b"k"))`` sends
``("kv_get", {"key": b"k"})``, so call sites can move to message objects one at a time.

- The body is a dict of the fields, except: a message with no fields sends ``None``, and one
  declared with ``body_is = "<field>"`` sends that field's value as the whole body (the task
  spec of ``push_task``: no wrapper on the hottest path).
- A field defaulting to ``OMIT`` is left out of the body when not given, as senders leave it
  out today; the handler applies its own default.
- ``oneway = True``: sent with ``conn.send``; nothing comes back. Otherwise ``reply`` names
  what the handler answers; a failing handler raises (see ``ember.protocol.errors``).
- Classes are ``ember.records`` records: ``__slots__``, and an ``__init__`` and ``to_body``
  written on first use (no dataclass machinery on the hot path, no cost at import);
  ``from_body`` reads a body back into a message.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ember.records import Record, RecordMeta


class _Omit:
    __slots__ = ()

    def __repr__(self) -> str:
        return "OMIT"


OMIT: Any = _Omit()  # "not in the body unless given"

_CLASS_VARS = frozenset({"op", "sent_by", "reply", "oneway", "body_is", "catalogue"})


class Catalogue:
    """Every message one kind of process handles, by op."""

    def __init__(self, service: str, handled_by: str) -> None:
        self.service = service
        self.handled_by = handled_by
        self.messages: dict[str, type[Message]] = {}

    def __contains__(self, op: object) -> bool:
        return op in self.messages

    def __getitem__(self, op: str) -> type[Message]:
        return self.messages[op]

    def __iter__(self):
        return iter(self.messages.values())

    def __len__(self) -> int:
        return len(self.messages)

    def ops(self) -> set[str]:
        return set(self.messages)

    def add(self, cls: type[Message]) -> None:
        if cls.op in self.messages:
            raise TypeError(f"{self.service}: two messages for op {cls.op!r}")
        self.messages[cls.op] = cls


class _MessageMeta(RecordMeta):
    """A record that knows its catalogue and how it travels (``to_body``, written on first
    use, like the record's ``__init__``)."""

    def __new__(mcls, name: str, bases: tuple, ns: dict[str, Any], **kw: Any) -> type:
        cls = super().__new__(mcls, name, bases, ns, **kw)
        cls.to_body = _first_to_body
        catalogue = getattr(cls, "catalogue", None)
        if "op" in ns and catalogue is not None:
            catalogue.add(cls)
        return cls


def _first_to_body(self: Any) -> Any:
    cls = type(self)
    cls.to_body = _write_to_body(cls)
    return cls.to_body(self)


def _write_to_body(cls: Any) -> Any:
    """``to_body`` written out for the class's fields (no loop over fields per message)."""
    fields, defaults = cls._fields, cls._defaults
    body_is = getattr(cls, "body_is", None)
    if body_is is not None:
        source = f"def to_body(self):\n    return self.{body_is}"
    elif not fields:
        source = "def to_body(self):\n    return None"
    else:
        required = [f for f in fields if defaults.get(f, None) is not OMIT]
        optional = [f for f in fields if f not in required]
        items = ", ".join(f"{f!r}: self.{f}" for f in required)
        lines = [f"    body = {{{items}}}"]
        for f in optional:
            lines.append(f"    if self.{f} is not OMIT:\n        body[{f!r}] = self.{f}")
        source = "def to_body(self):\n" + "\n".join(lines) + "\n    return body"
    env: dict[str, Any] = {"OMIT": OMIT}
    exec(source, env)  # noqa: S102 - field names are identifiers the class declared
    return env["to_body"]


class Message(Record, metaclass=_MessageMeta):
    """The base of every catalogued message; see the module docstring."""

    op: ClassVar[str]
    sent_by: ClassVar[str] = ""
    reply: ClassVar[str] = "None"
    oneway: ClassVar[bool] = False
    body_is: ClassVar[str | None] = None
    catalogue: ClassVar[Catalogue | None] = None
    _not_fields: ClassVar[tuple[str, ...]] = tuple(_CLASS_VARS)

    def to_body(self) -> Any:  # replaced per class, on first use, by _write_to_body
        return None

    @classmethod
    def from_body(cls, body: Any) -> Message:
        """The message a handler was sent (the inverse of ``to_body``)."""
        if cls.body_is is not None:
            return cls(**{cls.body_is: body})
        if not cls._fields:
            return cls()
        return cls(**{f: body[f] for f in cls._fields if f in body})

    def __repr__(self) -> str:
        shown = ", ".join(
            f"{f}={getattr(self, f)!r}" for f in self._fields if getattr(self, f) is not OMIT
        )
        return f"{type(self).__name__}({shown})"
