"""``ember.experimental``: Ray 0.8's dynamic custom resources."""

from __future__ import annotations

from ember import global_state


def set_resource(resource_name: str, capacity: float, client_id: str | None = None) -> None:
    """Sets a custom resource's capacity on a node (this one by default); 0 removes it."""
    if resource_name in ("CPU", "GPU", "memory", "object_store_memory"):
        raise ValueError(f"{resource_name} cannot be changed with set_resource")
    if not isinstance(capacity, int | float) or capacity < 0:
        raise ValueError(f"capacity must be a non-negative number, got {capacity!r}")
    worker = global_state.require_worker()
    node_id = bytes.fromhex(client_id) if client_id else worker.node_id
    # A node that is not alive is the GCS's ValueError, raised here as it was there.
    worker.call_gcs_sync(
        "set_resource", {"node_id": node_id, "name": resource_name, "capacity": float(capacity)}
    )


__all__ = ["set_resource"]
