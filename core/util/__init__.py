"""``ember.util``: ActorPool, placement groups, scheduling strategies, metrics, state,
``get_node_ip_address``, and
Ray's libraries ``queue`` (Queue) and ``multiprocessing`` (Pool); ``ember.util.joblib`` (a
joblib backend) is imported by name only, since joblib is an optional dependency.

Loaded on first use, like ``ember`` itself: the agent reads ``ember.util.metrics`` and must
not pull in the driver API with ``ActorPool`` and placement groups.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ember.lazy_exports import lazy_exports

# {public name: module defining it}; None: a submodule of that name.
_PUBLIC: dict[str, str | None] = {
    "ActorPool": "ember.util.actor_pool",
    "get_actor": "ember.actor",  # Ray 0.8 had it here
    "get_node_ip_address": "ember.runtime_context",
    "list_named_actors": "ember.actor",
    "PlacementGroup": "ember.util.placement_group",
    "get_current_placement_group": "ember.util.placement_group",
    "get_placement_group": "ember.util.placement_group",
    "placement_group": "ember.util.placement_group",
    "placement_group_table": "ember.util.placement_group",
    "remove_placement_group": "ember.util.placement_group",
    "metrics": None,
    "multiprocessing": None,
    "queue": None,
    "scheduling_strategies": None,
    "state": None,
}


__getattr__, __dir__ = lazy_exports("ember.util", _PUBLIC, globals())


if TYPE_CHECKING:
    from ember.actor import get_actor, list_named_actors
    from ember.runtime_context import get_node_ip_address
    from ember.util import metrics, multiprocessing, queue, scheduling_strategies, state
    from ember.util.actor_pool import ActorPool
    from ember.util.placement_group import (
        PlacementGroup,
        get_current_placement_group,
        get_placement_group,
        placement_group,
        placement_group_table,
        remove_placement_group,
    )

__all__ = [  # literal, so tools see the exports (the same names as _PUBLIC)
    "ActorPool",
    "PlacementGroup",
    "get_actor",
    "get_current_placement_group",
    "get_node_ip_address",
    "get_placement_group",
    "list_named_actors",
    "metrics",
    "multiprocessing",
    "placement_group",
    "placement_group_table",
    "queue",
    "remove_placement_group",
    "scheduling_strategies",
    "state",
]
