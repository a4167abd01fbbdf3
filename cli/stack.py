"""``ember stack``: the Python stacks of every worker of the cluster (py-spy, through the
agents), grouped by node and worker, with the task each one is running."""

from __future__ import annotations

from typing import Any

import click
from ember.cli.api_client import cluster_options, resolve
from ember.cli.errors import fail
from ember.cli.output import emit, format_option


@click.command("stack")
@click.option("--node", "node_id", default=None, help="Only this node (id or unique prefix).")
@click.option("--pid", type=click.IntRange(1), default=None, help="Only this process.")
@cluster_options
@format_option
def stack(node_id: str | None, pid: int | None, address: str | None, fmt: str) -> None:
    """Dump the stacks of the cluster's workers."""
    api = resolve(address)
    data = api.get("/api/stack", {"node_id": node_id, "pid": pid}, timeout=120)
    emit(data, fmt, render)
    if not any(p.get("threads") for n in data["nodes"] for p in n.get("processes", [])):
        errors = [n.get("error") for n in data["nodes"]] + [
            p.get("error") for n in data["nodes"] for p in n.get("processes", [])
        ]
        if any(errors) or data.get("missing"):
            fail("no stack could be read (the reasons are above)")


def render(data: dict[str, Any]) -> str:
    lines: list[str] = []
    for node in data["nodes"]:
        lines.append(f"======== Node {node['node_id']} ========")
        if node.get("error"):
            lines.append(f"  (no stacks: {node['error']})")
        for proc in node.get("processes", []):
            what = proc.get("kind") or "process"
            task = proc.get("current_task")
            head = f"--- {what} pid={proc.get('pid')}"
            if proc.get("worker_id"):
                head += f" worker={proc['worker_id']}"
            head += f" running {task}" if task else " (idle)" if what == "worker" else ""
            lines.append(head + " ---")
            if proc.get("error"):
                lines.append(f"  {proc['error']}")
                continue
            for thread in proc.get("threads", []):
                state = "active" if thread.get("active") else "idle"
                lines.append(
                    f"  Thread {thread.get('thread_id')} ({thread.get('name') or '?'}, {state})"
                )
                for frame in thread.get("frames", []):
                    lines.append(
                        f"    {frame.get('function')} ({frame.get('file')}:{frame.get('line')})"
                    )
            lines.append("")
    for node_id, why in (data.get("missing") or {}).items():
        lines.append(f"======== Node {node_id}: not reached ========")
        lines.append(f"  (no stacks: {why})")
    if not data["nodes"] and not data.get("missing"):
        lines.append("(no nodes: no agent is connected to the dashboard)")
    return "\n".join(lines).rstrip()
