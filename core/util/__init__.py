"""``ember.util``: ActorPool, placement groups, scheduling strategies."""

from ember.api import get_actor  # Ray 0.8 had it here (002 §5.3.8)
from ember.util import metrics, scheduling_strategies
from ember.util.placement_group import (
    PlacementGroup,
    get_placement_group,
    placement_group,
    placement_group_table,
    remove_placement_group,
)

try:
    from ember.util.actor_pool import ActorPool
except ImportError:  # pragma: no cover - being written
    ActorPool = None  # type: ignore[assignment,misc]

__all__ = [
    "ActorPool",
    "get_actor",
    "metrics",
    "PlacementGroup",
    "get_placement_group",
    "placement_group",
    "placement_group_table",
    "remove_placement_group",
    "scheduling_strategies",
]
