"""Ray 0.8's ``ray.tune.function_runner``: ``StatusReporter``, the ``reporter`` a
``def train(config, reporter)`` trainable is given."""

from ember.tune.trainable.session import Reporter as StatusReporter

__all__ = ["StatusReporter"]
