"""The per-node agent: node and process metrics, logs, stacks and profiles, and the node's
task events, streamed to the dashboard. Part of the runtime: it never imports the dashboard."""
