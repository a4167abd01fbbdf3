"""Scheduling strategies: ``"DEFAULT"``, ``"SPREAD"``, node affinity and placement groups."""

from __future__ import annotations

from typing import Any


class NodeAffinitySchedulingStrategy:
    """Run on the node with this id; with ``soft=True``, elsewhere if it cannot."""

    def __init__(self, node_id: str, soft: bool, _spill_on_unavailable: bool = False) -> None:
        if not isinstance(node_id, str):
            raise ValueError("node_id must be the node's hex id (a str)")
        self.node_id = node_id
        self.soft = soft

    def to_wire(self) -> tuple:
        return ("NODE_AFFINITY", bytes.fromhex(self.node_id), self.soft)


class PlacementGroupSchedulingStrategy:
    """Run inside a placement group (in one bundle, or any with index -1)."""

    def __init__(
        self,
        placement_group: Any,
        placement_group_bundle_index: int = -1,
        placement_group_capture_child_tasks: bool | None = None,
    ) -> None:
        self.placement_group = placement_group
        self.placement_group_bundle_index = placement_group_bundle_index
        self.placement_group_capture_child_tasks = placement_group_capture_child_tasks

    def to_wire(self) -> tuple:
        pg = self.placement_group
        index = self.placement_group_bundle_index
        if index >= len(pg.bundle_specs):
            raise ValueError(
                f"placement_group_bundle_index {index} is out of range: the group has "
                f"{len(pg.bundle_specs)} bundles"
            )
        if self.placement_group_capture_child_tasks:
            # The tasks and actors it submits run in the group too (see captured_strategy).
            return ("PLACEMENT_GROUP", pg.id_bytes, index, True)
        return ("PLACEMENT_GROUP", pg.id_bytes, index)
