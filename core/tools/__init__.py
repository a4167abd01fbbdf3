"""Tools built on the runtime, not part of it: ``ember microbenchmark`` and ``ember demo``."""
