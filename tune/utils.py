"""Ray 0.8's ``ray.tune.utils``: ``pin_in_object_store`` / ``get_pinned_object`` (a large
object put once by the driver and read by every trial) and ``validate_save_restore`` (a class
trainable's ``save``/``restore`` tried before an experiment relies on them)."""

from __future__ import annotations

import tempfile
from typing import Any

import ember
from ember.tune.trainable.session import TrialContext

# The driver holds a reference to every pinned object, so none is freed while it runs.
_pinned: list[Any] = []


def pin_in_object_store(obj: Any) -> Any:
    """Puts ``obj`` in the object store once; the returned id can be captured by a closure."""
    ref = ember.put(obj)
    _pinned.append(ref)
    return ref


def get_pinned_object(pinned_id: Any) -> Any:
    return ember.get(pinned_id)


def validate_save_restore(
    trainable_cls: type,
    config: dict | None = None,
    num_gpus: int = 0,
    use_object_store: bool = False,
) -> bool:
    """Trains one instance three steps, saves it, restores a second from that checkpoint and
    checks the second goes on from iteration 4. Both instances run in this process (each in
    its own temporary trial directory); ``num_gpus`` is accepted for Ray's signature."""
    with tempfile.TemporaryDirectory() as first, tempfile.TemporaryDirectory() as second:
        one = trainable_cls(config or {}, TrialContext("validate_1", "validate_1", "", first))
        two = trainable_cls(config or {}, TrialContext("validate_2", "validate_2", "", second))
        try:
            for _ in range(3):
                result = one.train()
            if not result.get("training_iteration"):
                raise AssertionError("validation needs training_iteration in the results")
            if use_object_store:
                two.restore_from_object(one.save_to_object())
            else:
                two.restore(f"{first}/{one.save()}", one.iteration, one._time_total)
            for expected in (4, 5):
                got = two.train()["training_iteration"]
                if got != expected:
                    raise AssertionError(
                        f"after restoring, training_iteration is {got}, expected {expected}: "
                        "save/restore lost the trainable's progress"
                    )
        finally:
            one.stop()
            two.stop()
    return True
