"""Ray 0.8's trainable registry: ``tune.register_trainable(name, trainable)`` and then
``tune.run("name")``. Names live in the driver that registered them (trials get the function
or class itself, pickled), so registering is needed only to pass a name or a lambda."""

from __future__ import annotations

from typing import Any

_trainables: dict[str, Any] = {}


def register_trainable(name: str, trainable: Any) -> None:
    if not isinstance(name, str) or not name:
        raise TypeError(f"register_trainable needs a name (a non-empty str), got {name!r}")
    if not callable(trainable):
        raise TypeError(
            f"register_trainable({name!r}, ...) needs a function or a tune.Trainable class, "
            f"got {type(trainable).__name__}"
        )
    _trainables[name] = trainable


def get_trainable(name: str) -> Any:
    try:
        return _trainables[name]
    except KeyError:
        known = ", ".join(sorted(_trainables)) or "none"
        raise ValueError(
            f"no trainable is registered as {name!r} (registered: {known}); call "
            f"tune.register_trainable({name!r}, your_function_or_class) first, or pass the "
            "function or class itself (RLlib's algorithm names are not part of Ember)"
        ) from None


def register_env(name: str, env_creator: Any) -> None:
    raise NotImplementedError(
        f"register_env({name!r}, ...) registers an RLlib environment; RLlib is not part of Ember"
    )
