"""The ``ray.train`` spellings Ray 2.x programs use inside a Tune trial (``from ember import
train``): ``train.report``, ``train.get_checkpoint``, ``train.get_context``, ``Checkpoint``,
``RunConfig``, ``CheckpointConfig``, ``FailureConfig``, ``Result``. Each is ``ember.tune``'s
own object, re-exported: a program may mix ``tune.report`` and ``train.report``. (Ray 2.60
itself refuses them in a Tune trial with a DeprecationWarning; Ember keeps such programs
running.)

A library above the runtime, as ``ember.tune``; names load on first use, so a trial's worker
that calls ``train.report`` loads no more than ``tune.report`` does.
"""

from __future__ import annotations

from ember.lazy_exports import lazy_exports

_PUBLIC: dict[str, str | None] = {
    "Checkpoint": "ember.tune.checkpoint",
    "CheckpointConfig": "ember.tune.config",
    "FailureConfig": "ember.tune.config",
    "RunConfig": "ember.tune.config",
    "Result": "ember.tune.result_grid",
    "get_checkpoint": "ember.tune.trainable.session",
    "get_context": "ember.tune.trainable.session",
    "report": "ember.tune.trainable.session",
}

__getattr__, __dir__ = lazy_exports(__name__, _PUBLIC, globals())
__all__ = sorted(_PUBLIC)
