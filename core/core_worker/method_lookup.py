"""The callable an actor call runs: the method of the actor's class, bound to the instance.

As in Ray, which calls the class's function with the instance, the class's method wins over
an instance attribute of the same name (``self.done = False`` in ``__init__`` beside a method
``done``). Anything else (a property, ``__getattr__``, a callable set on the instance) is
looked up on the instance as Python would.
"""

from __future__ import annotations

import types
from typing import Any


def actor_method(actor: Any, name: str) -> tuple[Any, bool]:
    """``(the callable or None, whether it may be kept for the actor's later calls)``."""
    cls = type(actor)
    # What the class itself defines for ``name``, found as inspect.getattr_static would
    # (no descriptor run, no __getattr__): a walk of the MRO's own dicts, which runs none of
    # inspect's half-dozen functions in every new actor (each run copies shared pages).
    on_class = next((k.__dict__[name] for k in cls.__mro__ if name in k.__dict__), None)
    if isinstance(on_class, types.FunctionType | staticmethod | classmethod):
        return on_class.__get__(actor, cls), True
    return getattr(actor, name, None), False
