"""The workloads of ``ray microbenchmark``, runnable against any runtime with Ray's API.

The same code measures Ray and Ember: every workload is written against a runtime module
passed in (``rt`` is the imported ``ray`` or ``ember``), so the numbers compare like with
like. The definitions follow Ray's ``python/ray/_private/ray_perf.py`` (Ray 2.60): the same
remote functions and actor classes, batch sizes, multipliers and timing loop
(``ray_microbenchmark_helpers.timeit``), and the same output line per row::

    <name> per second <mean> +- <std>

Two rows are Ember's own targets and are measured in fresh processes:
``init -> first task -> shutdown`` (seconds; best and mean of 3) and
``idle local node resident memory`` (MB summed over the driver and every process of the
node, once it has gone idle).

This package imports nothing from Ember, so it can be loaded from its folder in an environment
that only has Ray (``benchmarks/compare_ray.py`` does that). Run it with::

    python -m ember.tools.microbenchmark [--filter SUBSTRING] [--quick] [--json FILE]
"""

from __future__ import annotations

from .main import main
from .workloads import select

__all__ = ["main", "select"]
