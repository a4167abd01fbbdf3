"""The chaos and abuse suite (issue 19): faults and hostile peers against a real two-node
cluster on loopback, under load, and a table of what survived and what leaked.
``python -m ember.tools.chaos --quick`` (or ``ember chaos --quick``); see ``main``."""
