"""Search spaces and search algorithms (``ember.tune.search``)."""

from ember.tune.search.basic_variant import (
    BasicVariantGenerator,
    SearchAlgorithm,
    SearchGenerator,
    Suggestion,
)
from ember.tune.search.repeater import Repeater
from ember.tune.search.searcher import ConcurrencyLimiter, Searcher
from ember.tune.search.variants import generate_variants

__all__ = [
    "BasicVariantGenerator",
    "ConcurrencyLimiter",
    "Repeater",
    "SearchAlgorithm",
    "SearchGenerator",
    "Searcher",
    "Suggestion",
    "generate_variants",
]
