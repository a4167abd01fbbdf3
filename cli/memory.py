"""``ember memory``: every ObjectRef in the cluster that pins an object, in Ray's layout
(002 §5.3.6 and ../shared/reference/ray-2.60-cli-output.md), with call sites."""

from __future__ import annotations

import datetime
import json
from typing import Any

import click
from ember.cluster_address import find_gcs_address
from ember.protocol import connection as conn_mod

UNITS = {"B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9}
KINDS = (
    ("LOCAL_REFERENCE", "Local References"),
    ("PINNED_IN_MEMORY", "Pinned"),
    ("USED_BY_PENDING_TASK", "Used by task"),
    ("CAPTURED_IN_OBJECT", "Captured in Objects"),
    ("ACTOR_HANDLE", "Actor Handles"),
)


async def _collect(gcs_address: str) -> list[dict[str, Any]]:
    gcs = await conn_mod.connect(gcs_address, name="gcs", timeout=5.0)
    try:
        nodes = await gcs.call("list_nodes", None, timeout=10.0)
    finally:
        gcs.close()
    out = []
    for node in nodes:
        if node["state"] != "ALIVE":
            continue
        raylet = await conn_mod.connect(node["address"], name="raylet", timeout=5.0)
        try:
            out.append(await raylet.call("collect_references", None, timeout=15.0))
        finally:
            raylet.close()
    return out


def collect(gcs_address: str) -> list[dict[str, Any]]:
    loop = conn_mod.new_event_loop()
    try:
        return loop.run_until_complete(_collect(gcs_address))
    finally:
        loop.close()


def rows_of(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (process, object, reference kind)."""
    rows = []
    for node in nodes:
        for proc in node["processes"]:
            for ref in proc["rows"]:
                for kind in ref["reference_types"]:
                    if kind == "BORROWED":
                        continue
                    rows.append(
                        {
                            "node_ip": node["node_ip"],
                            "node_id": node["node_id"],
                            "pid": proc["pid"],
                            "type": "Driver" if proc["is_driver"] else "Worker",
                            "call_site": ref["call_site"] or "disabled",
                            "status": ref["status"],
                            "attempt": 1,
                            "size": ref["size"],
                            "reference_type": kind,
                            "object_ref": ref["object_id"],
                        }
                    )
    return rows


def _size(n: float, units: str) -> str:
    if n is None or n < 0:
        return "?"
    return f"{n / UNITS[units]:.1f} {units}"


def render(nodes: list[dict[str, Any]], group_by: str, sort_by: str, units: str) -> str:
    rows = rows_of(nodes)
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
    used = sum(n["store"]["used_bytes"] for n in nodes)
    cap = sum(n["store"]["capacity_bytes"] for n in nodes) or 1
    count = sum(n["store"]["num_objects"] for n in nodes)
    lines.append(
        f"Shared-memory store usage {used / 2**20:.0f} MiB, {count} objects, "
        f"{used / cap * 100:.2f}% full"
    )
    missing = sum(n.get("unanswered", 0) for n in nodes)
    if missing:
        lines.append(f"({missing} process(es) did not answer in time and are not listed)")
    return "\n".join(lines)


@click.command("memory")
@click.option("--address", default=None, help="The cluster's GCS address (default: find it).")
@click.option("--group-by", type=click.Choice(["node", "stack_trace"]), default="node")
@click.option("--sort-by", type=click.Choice(["size", "reference_type"]), default="size")
@click.option("--units", type=click.Choice(list(UNITS)), default="B")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table")
def memory(address: str | None, group_by: str, sort_by: str, units: str, fmt: str) -> None:
    """Show every ObjectRef that pins an object, by node, process and reference type."""
    try:
        gcs = find_gcs_address(address)
        nodes = collect(gcs)
    except (TimeoutError, ConnectionError, OSError) as e:
        raise click.ClickException(f"could not reach the cluster ({address or 'auto'}): {e}") from e
    if fmt == "json":
        click.echo(json.dumps({"nodes": nodes, "rows": rows_of(nodes)}, indent=1, default=str))
    else:
        click.echo(render(nodes, group_by, sort_by, units))
