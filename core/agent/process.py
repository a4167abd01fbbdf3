"""The agent as a process of its own (``python -m ember.agent``): its arguments, its log file,
its tie to the raylet, and its place below the work in the CPU's queue."""

from __future__ import annotations

import argparse
import asyncio
import os

import psutil
from ember.agent.agent import Agent
from ember.process_util import die_with_parent, setup_process_logging


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="ember-agent")
    p.add_argument("--node-id", required=True, help="hex")
    p.add_argument("--session-dir", required=True)
    p.add_argument("--raylet-address", required=True)
    p.add_argument("--gcs-address", default="")
    p.add_argument("--dashboard-address", default="", help="host:port of the dashboard's gRPC")
    p.add_argument("--node-ip", default="127.0.0.1")
    p.add_argument("--head", action="store_true")
    p.add_argument("--components", default="", help="name=pid,... of the node's processes")
    p.add_argument("--token-file", default=None)
    p.add_argument("--ready-fd", type=int, default=-1)
    p.add_argument("--parent-pid", type=int, default=0)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    setup_process_logging(os.path.join(args.session_dir, "logs", "agent.log"))
    if args.parent_pid:
        die_with_parent(args.parent_pid)
    psutil.Process().nice(int(os.environ.get("EMBER_AGENT_NICE", "19")))  # yields to the work
    asyncio.run(Agent(args).run())
