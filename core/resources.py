"""Resource shapes (``{"CPU": 1.0, "GPU": 0.5, "custom": 2}``) and their arithmetic.

Amounts are kept as fixed-point integers (1/10,000ths) inside ``NodeResources`` so that
fractional requests (0.1 GPU ten times) add and subtract back to exactly zero.
"""

from __future__ import annotations

from typing import Any

UNIT = 10_000


def to_fixed(amount: float) -> int:
    return round(amount * UNIT)


def fits(shape: dict[str, float], available: dict[str, float]) -> bool:
    for name, amount in shape.items():
        if amount > 0 and to_fixed(available.get(name, 0.0)) < to_fixed(amount):
            return False
    return True


BYTE_RESOURCES = ("memory", "object_store_memory")


def fmt_amount(name: str, amount: float) -> str:
    """One resource amount as a user reads it: bytes in binary units ("2.0 GiB"), since
    "memory: 2.14748e+09" makes them count digits; other resources as plain numbers."""
    if name not in BYTE_RESOURCES:
        return f"{amount:g}"
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if amount >= scale:
            return f"{amount / scale:.1f} {unit}"
    return f"{int(amount)} B"


def fmt(shape: dict[str, float]) -> str:
    if not shape:
        return "{}"
    return "{" + ", ".join(f"{k}: {fmt_amount(k, v)}" for k, v in sorted(shape.items())) + "}"


class NodeResources:
    """One node's total and available resources, and which GPU ids are handed out."""

    def __init__(self, total: dict[str, float], gpu_ids: list[int] | None = None) -> None:
        self.total: dict[str, int] = {k: to_fixed(v) for k, v in total.items()}
        self.available: dict[str, int] = dict(self.total)
        n_gpus = int(total.get("GPU", 0))
        ids = gpu_ids if gpu_ids is not None else list(range(n_gpus))
        self.gpu_free: dict[int, int] = {g: UNIT for g in ids}  # {gpu id: free fraction}
        # Placement groups' GPUs: a reserved bundle holds GPU ids, which the tasks placed in
        # it get ({pg hex: {gpu id: free fraction}}, {(pg hex, bundle index): [gpu ids]}).
        self.pg_gpu_free: dict[str, dict[int, int]] = {}
        self.bundle_gpus: dict[tuple[str, int], list[int]] = {}

    def can_fit(self, shape: dict[str, float]) -> bool:
        avail = self.available
        for name, amount in shape.items():
            if amount > 0 and avail.get(name, 0) < to_fixed(amount):
                return False
        if shape.get("GPU"):
            return self._pick_gpus(shape["GPU"]) is not None
        return True

    def feasible(self, shape: dict[str, float]) -> bool:
        total = self.total
        return all(
            amount <= 0 or total.get(n, 0) >= to_fixed(amount) for n, amount in shape.items()
        )

    def acquire(self, shape: dict[str, float]) -> list[int]:
        """Takes the shape (caller checked can_fit); returns the GPU ids assigned."""
        gpu_ids: list[int] = []
        if shape.get("GPU"):
            picked = self._pick_gpus(shape["GPU"])
            if picked:
                share = to_fixed(shape["GPU"]) if shape["GPU"] < 1 else UNIT
                for g in picked:
                    self.gpu_free[g] -= share
                gpu_ids = picked
        group_gpus = _group_gpu_key(shape) if self.pg_gpu_free else None
        if group_gpus is not None:
            gpu_ids = self._take_group_gpus(*group_gpus)
        for name, amount in shape.items():
            self.available[name] = self.available.get(name, 0) - to_fixed(amount)
        return gpu_ids

    def release(self, shape: dict[str, float], gpu_ids: list[int] | None = None) -> None:
        for name, amount in shape.items():
            self.available[name] = self.available.get(name, 0) + to_fixed(amount)
        group_gpus = _group_gpu_key(shape) if gpu_ids else None
        if group_gpus is not None:
            pg_hex, _, amount = group_gpus
            free = self.pg_gpu_free.get(pg_hex)
            share = to_fixed(amount) if amount < 1 else UNIT
            for g in gpu_ids or ():
                if free is not None and g in free:
                    free[g] = min(UNIT, free[g] + share)
            return
        if gpu_ids:
            share = to_fixed(shape.get("GPU", 1)) if shape.get("GPU", 1) < 1 else UNIT
            for g in gpu_ids:
                self.gpu_free[g] = min(UNIT, self.gpu_free.get(g, 0) + share)

    # -- placement groups' GPUs --------------------------------------------------------------
    def reserve_bundle_gpus(self, pg_hex: str, index: int, gpu_ids: list[int]) -> None:
        self.bundle_gpus[(pg_hex, index)] = list(gpu_ids)
        self.pg_gpu_free.setdefault(pg_hex, {}).update(dict.fromkeys(gpu_ids, UNIT))

    def drop_group_gpus(self, pg_hex: str) -> list[int]:
        """Forgets a removed group's GPUs; the ids its bundles held."""
        self.pg_gpu_free.pop(pg_hex, None)
        held = []
        for key in [k for k in self.bundle_gpus if k[0] == pg_hex]:
            held += self.bundle_gpus.pop(key)
        return held

    def drop_bundle_gpus(self, pg_hex: str, index: int) -> list[int]:
        """Forgets one bundle's GPUs (released while its group stays); the ids it held."""
        held = self.bundle_gpus.pop((pg_hex, index), [])
        free = self.pg_gpu_free.get(pg_hex, {})
        for g in held:
            free.pop(g, None)
        return held

    def _take_group_gpus(self, pg_hex: str, index: int, amount: float) -> list[int]:
        free = self.pg_gpu_free.get(pg_hex)
        if not free:
            return []
        allowed = self.bundle_gpus.get((pg_hex, index)) if index >= 0 else list(free)
        need = to_fixed(amount) if amount < 1 else UNIT
        count = 1 if amount < 1 else int(amount)
        picked = [g for g in sorted(allowed or ()) if free.get(g, 0) >= need][:count]
        for g in picked:
            free[g] -= need
        return picked

    def _pick_gpus(self, amount: float) -> list[int] | None:
        if amount < 1:
            need = to_fixed(amount)
            # Fill partly used GPUs first so whole ones stay free for whole requests.
            for g, free in sorted(self.gpu_free.items(), key=lambda kv: (kv[1], kv[0])):
                if free >= need:
                    return [g]
            return None
        whole = [g for g, free in sorted(self.gpu_free.items()) if free == UNIT]
        n = int(amount)
        return whole[:n] if len(whole) >= n else None

    def add(self, name: str, amount: float) -> None:
        """Adds capacity (placement-group bundle resources)."""
        self.total[name] = self.total.get(name, 0) + to_fixed(amount)
        self.available[name] = self.available.get(name, 0) + to_fixed(amount)

    def remove(self, name: str, amount: float) -> None:
        self.total[name] = self.total.get(name, 0) - to_fixed(amount)
        self.available[name] = self.available.get(name, 0) - to_fixed(amount)
        if self.total[name] <= 0:
            self.total.pop(name, None)
            self.available.pop(name, None)

    def total_dict(self) -> dict[str, float]:
        return {k: v / UNIT for k, v in self.total.items()}

    def available_dict(self) -> dict[str, float]:
        return {k: v / UNIT for k, v in self.available.items() if k in self.total}


def of_resource(shape: dict[str, float], resource: str) -> dict[str, float]:
    """The amounts of ``resource`` a shape holds: the node's (``CPU``) and any placement group
    bundle's (``CPU_group_...``)."""
    group = resource + "_group_"
    return {k: v for k, v in shape.items() if v and (k == resource or k.startswith(group))}


def _group_gpu_key(shape: dict[str, float]) -> tuple[str, int, float] | None:
    """``(pg hex, bundle index or -1, amount)`` when the shape asks for a group's GPUs."""
    for name, amount in shape.items():
        if amount and name.startswith("GPU_group_"):
            rest = name[len("GPU_group_") :]
            index, _, pg_hex = rest.rpartition("_")
            return pg_hex, int(index) if index else -1, amount
    return None


def pg_resource_name(resource: str, pg_id_hex: str, bundle_index: int = -1) -> str:
    if bundle_index < 0:
        return f"{resource}_group_{pg_id_hex}"
    return f"{resource}_group_{bundle_index}_{pg_id_hex}"


def apply_strategy(shape: dict[str, float], strategy: Any) -> dict[str, float]:
    """A task in a placement group asks for the group's renamed resources instead."""
    if not isinstance(strategy, tuple) or strategy[0] != "PLACEMENT_GROUP":
        return shape
    _, pg_id, bundle_index = strategy[:3]
    pg_hex = pg_id.hex()
    renamed = {pg_resource_name(k, pg_hex, bundle_index): v for k, v in shape.items() if v}
    # Every task in a group needs a sliver of the group's bundle marker, so even a task with
    # no resources lands on a node that holds the group.
    renamed[pg_resource_name("bundle", pg_hex, bundle_index)] = 0.001
    return renamed


def group_request(shape: dict[str, float]) -> tuple[str, int, dict[str, float]] | None:
    """A shape renamed for a placement group (``apply_strategy``) read back as the user
    wrote it: ``(pg hex, bundle index or -1, {CPU: 1})``; None for a shape of no group.
    What users read (``ember status``, warnings) names the group, never ``CPU_group_0_<id>``."""
    pg_hex, index, plain = "", -1, {}
    for name, amount in shape.items():
        resource, sep, rest = name.partition("_group_")
        if not sep:
            return None
        head, _, tail = rest.rpartition("_")
        pg_hex, index = (tail, int(head)) if head.isdigit() else (rest, -1)
        if len(pg_hex) < 16 or pg_hex.strip("0123456789abcdef"):
            return None  # a user's resource that happens to hold "_group_"
        if resource != "bundle":  # the group's marker: not something the user asked for
            plain[resource] = amount
    return (pg_hex, index, plain) if pg_hex else None


def fmt_request(shape: dict[str, float], group_names: dict[str, str] | None = None) -> str:
    """``fmt`` of a shape; a placement group's as "placement group 'name', bundle 0: {CPU: 1}"."""
    found = group_request(shape)
    if found is None:
        return fmt(shape)
    pg_hex, index, plain = found
    name = (group_names or {}).get(pg_hex)
    label = f"placement group {name!r}" if name else f"placement group {pg_hex[:12]}"
    where = f"bundle {index}" if index >= 0 else "any bundle"
    return f"{label}, {where}: {fmt(plain)}"


def waiting_bundles(group: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The bundles a placement group (a row of the GCS's cluster info) still waits for room
    for: all of a PENDING group's, the ones a RESCHEDULING group lost with a dead node; None
    for a group that waits for nothing. ``ember status`` and the autoscaler read demand so."""
    state = group.get("state")
    if state not in ("PENDING", "RESCHEDULING"):
        return None
    bundles = list(group.get("bundles") or ())
    if state == "RESCHEDULING":
        placed = list(group.get("bundle_nodes") or ())
        bundles = [b for i, b in enumerate(bundles) if i >= len(placed) or not placed[i]]
    return bundles
