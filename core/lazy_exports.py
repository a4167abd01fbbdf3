"""A package's public names, loaded on first use (PEP 562): ``ember`` and ``ember.util``.

The node's own processes import ``ember.<component>``, which runs ``ember/__init__.py``;
importing the driver API there cost each of them ~3.5 MB of resident memory.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def lazy_exports(
    package: str, public: dict[str, str | None], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``, whose ``public`` maps each name to
    the module defining it (None: the submodule of that name). ``namespace`` is the package's
    globals: a loaded name is stored there, so later reads do not come back here."""

    def __getattr__(name: str) -> Any:
        if name not in public:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = public[name]
        if module is None:
            value = importlib.import_module(f"{package}.{name}")
        else:
            value = getattr(importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(public))

    return __getattr__, __dir__
