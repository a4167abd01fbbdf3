"""``ember memory``: every ObjectRef in the cluster that pins an object, in Ray's layout
(the layout of `ray memory` in Ray 2.60), with call sites; read from the
dashboard's ``/api/objects``, which asks every node's processes through their agents."""

from __future__ import annotations

import datetime
from typing import Any

import click
from ember.cli.api_client import cluster_options, resolve
from ember.cli.humanize import size
from ember.cli.output import dump, format_option

UNITS = {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9}
KINDS = (
    ("LOCAL_REFERENCE", "Local References"),
    ("PINNED_IN_MEMORY", "Pinned"),
    ("USED_BY_PENDING_TASK", "Used by task"),
    ("CAPTURED_IN_OBJECT", "Captured in Objects"),
    ("ACTOR_HANDLE", "Actor Handles"),
)
_KNOWN = {kind for kind, _ in KINDS}


def collect(api: Any) -> dict[str, Any]:
    """The memory view from ``/api/objects`` (fresh: collected now from every node) and the
    stores' use from each node's latest metrics."""
    objects, last = api.list_all("/api/objects", max_age=0)
    nodes, _ = api.list_all("/api/nodes", ["state=ALIVE"])
    store = {}
    for n in nodes:
        m = api.get(f"/api/nodes/{n['node_id']}").get("metrics") or {}
        store[n["node_id"]] = {
            "used_bytes": m.get("object_store_used_bytes") or 0,
            "capacity_bytes": m.get("object_store_capacity_bytes") or 0,
            "num_objects": m.get("object_store_objects") or 0,
            "spilled_bytes": m.get("object_store_spilled_bytes") or 0,
            "spilled_objects": m.get("object_store_spilled_objects") or 0,
            "spilled_bytes_total": m.get("object_store_spilled_bytes_total") or 0,
            "spilled_objects_total": m.get("object_store_spilled_objects_total") or 0,
            "restored_bytes_total": m.get("object_store_restored_bytes_total") or 0,
            "restored_objects_total": m.get("object_store_restored_objects_total") or 0,
            "write_seconds": m.get("object_store_spill_write_seconds") or 0.0,
            "read_seconds": m.get("object_store_restore_read_seconds") or 0.0,
        }
    return {"objects": objects, "missing": last.get("missing") or {}, "store": store}


def rows_of(data: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per (process, object, reference kind), in ``ray memory``'s columns."""
    rows = []
    for r in data["objects"]:
        kind = r.get("reference_type")
        if kind not in _KNOWN:
            continue  # BORROWED: the owner's row already lists the object
        rows.append(
            {
                "node_ip": r.get("ip") or "?",
                "node_id": r.get("node_id"),
                "pid": r.get("pid"),
                "type": "Driver" if r.get("is_driver") else "Worker",
                "call_site": r.get("call_site") or "disabled",
                "status": r.get("status"),
                "attempt": 1,
                "size": r.get("object_size"),
                "reference_type": kind,
                "object_ref": r.get("object_id"),
            }
        )
    return rows


def _size(n: float, units: str) -> str:
    if n is None or n < 0:
        return "?"
    if units == "auto":
        return size(n)
    return f"{n / UNITS[units]:.1f} {units}"


def render(data: dict[str, Any], group_by: str, sort_by: str, units: str) -> str:
    rows = rows_of(data)
    now = datetime.datetime.now()
    lines = [
        f"======== Object references status: {now} ========",
        f"Grouping by {'node address' if group_by == 'node' else 'stack trace'}...        "
        f"Sorting by {'object size' if sort_by == 'size' else 'reference type'}...        "
        "Display all entries per group...",
        "",
    ]
    if sort_by == "size":
        rows.sort(key=lambda r: -(r["size"] if r["size"] and r["size"] > 0 else 0))
    else:
        rows.sort(key=lambda r: r["reference_type"])
    key = "node_ip" if group_by == "node" else "call_site"
    groups: dict[str, list] = {}
    for r in rows:
        groups.setdefault(r[key], []).append(r)
    label = "node address" if group_by == "node" else "call site"
    for name, group in groups.items():
        used = sum(r["size"] for r in group if r["size"] and r["size"] > 0)
        lines.append(f"--- Summary for {label}: {name} ---")
        header = ["Mem Used by Objects"] + [title for _, title in KINDS]
        values = [_size(used, units)]
        for kind, _ in KINDS:
            of_kind = [r for r in group if r["reference_type"] == kind]
            size = sum(r["size"] for r in of_kind if r["size"] and r["size"] > 0)
            values.append(f"{len(of_kind)}, ({_size(size, units)})")
        widths = [max(len(h), len(v)) + 2 for h, v in zip(header, values, strict=True)]
        lines.append("".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip())
        lines.append("".join(v.ljust(w) for v, w in zip(values, widths, strict=True)).rstrip())
        lines.append("")
        lines.append(f"--- Object references for {label}: {name} ---")
        cols = [
            "IP Address",
            "PID",
            "Type",
            "Call Site",
            "Status",
            "Attempt",
            "Size",
            "Reference Type",
            "Object Ref",
        ]
        table = [
            [
                r["node_ip"],
                str(r["pid"]),
                r["type"],
                r["call_site"],
                r["status"],
                str(r["attempt"]),
                _size(r["size"], units),
                r["reference_type"],
                r["object_ref"],
            ]
            for r in group
        ]
        widths = [max([len(c)] + [len(t[i]) for t in table]) for i, c in enumerate(cols)]
        lines.append(" | ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)).rstrip())
        for t in table:
            lines.append(" | ".join(v.ljust(w) for v, w in zip(t, widths, strict=True)).rstrip())
        lines.append("")
    if not rows:
        lines.append("(no object references in the cluster)")
        lines.append("")
    lines.append("--- Aggregate object store stats across all nodes ---")
    stores = data["store"].values()
    used = sum(n["used_bytes"] for n in stores)
    cap = sum(n["capacity_bytes"] for n in stores) or 1
    count = sum(n["num_objects"] for n in stores)
    lines.append(
        f"Shared-memory store usage {used / 2**20:.0f} MiB, {count} objects, "
        f"{used / cap * 100:.2f}% full"
    )
    lines.extend(_spill_lines(stores))
    for node_id, why in sorted(data["missing"].items()):
        lines.append(f"(node {node_id} is not listed in full: {why})")
    return "\n".join(lines)


def _spill_lines(stores: Any) -> list[str]:
    """Ray's spill lines: what is on disk now, what was written and read back so far (with
    the average throughput of the spill threads' I/O)."""
    stores = list(stores)

    def total(key: str) -> float:
        return sum(n.get(key, 0) for n in stores)

    on_disk, n_disk = total("spilled_bytes"), total("spilled_objects")
    written, n_written = total("spilled_bytes_total"), total("spilled_objects_total")
    restored, n_restored = total("restored_bytes_total"), total("restored_objects_total")
    if not (on_disk or written or restored):
        return []
    mib = 2**20
    lines = [f"Spilled on disk now {on_disk / mib:.0f} MiB, {int(n_disk)} objects"]
    if written:
        speed = written / mib / max(total("write_seconds"), 1e-9)
        lines.append(
            f"Spilled {written / mib:.0f} MiB, {int(n_written)} objects, "
            f"avg write throughput {speed:.0f} MiB/s"
        )
    if restored:
        speed = restored / mib / max(total("read_seconds"), 1e-9)
        lines.append(
            f"Restored {restored / mib:.0f} MiB, {int(n_restored)} objects, "
            f"avg read throughput {speed:.0f} MiB/s"
        )
    return lines


@click.command("memory")
@cluster_options
@click.option("--group-by", type=click.Choice(["node", "stack_trace"]), default="node")
@click.option("--sort-by", type=click.Choice(["size", "reference_type"]), default="size")
@click.option(
    "--units",
    type=click.Choice(["auto", *UNITS]),
    default="auto",
    show_default=True,
    help="Sizes' unit; auto: binary units that fit each (80.0 MiB). B gives `ray memory`'s "
    "own layout.",
)
@format_option
def memory(address: str | None, group_by: str, sort_by: str, units: str, fmt: str) -> None:
    """Show every ObjectRef that pins an object, by node, process and reference type."""
    data = collect(resolve(address))
    if fmt == "table":
        click.echo(render(data, group_by, sort_by, units))
    else:  # exact byte counts
        click.echo(dump({**data, "rows": rows_of(data)}, fmt))
