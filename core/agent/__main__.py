"""``python -m ember.agent``: this node's agent as a process of its own."""

from ember.agent.process import main

main()
