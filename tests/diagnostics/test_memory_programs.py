"""002 §5.3.6's programs 3 and 4, the rows the document shows in the *worker* running the task
(tests/seeds/test_seed_memory_programs.py checks the driver's rows of all five programs):

3. pending task references: the worker "holds a reference to the object because it is
   PINNED_IN_MEMORY, because the Python arg is directly referencing the memory in the plasma".
   The document's ``ray.put(None)`` is small, and Ember (like Ray since 1.0) passes small
   values inline, so no store memory is pinned for it; the same program with a value that
   lives in the store (a numpy array) shows the documented row.
4. serialized references: "both the driver and the worker process running the task hold a
   LOCAL_REFERENCE to the object", run exactly as written.

``ember memory --format json`` is polled (the task has to start first)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import ember
import numpy as np
import pytest
from ember_test_utils import wait_until

EMBER = os.path.join(os.path.dirname(sys.executable), "ember")
pytestmark = pytest.mark.timeout(120)


@ember.remote
def spin(arg):
    while True:
        pass


def _rows_for(ctx, object_hex: str) -> list[tuple[str, str]]:
    out = subprocess.run(
        [EMBER, "memory", "--format", "json", "--address", ctx.dashboard_url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)["rows"]
    return [(r["type"], r["reference_type"]) for r in rows if r["object_ref"] == object_hex]


def _wait_rows(ctx, object_hex: str, expected: set[tuple[str, str]]) -> list:
    last: list = []

    def shown() -> bool:
        last[:] = _rows_for(ctx, object_hex)
        return expected <= set(last)

    try:
        wait_until(shown, timeout=30, interval=0.5, message=f"{expected} for {object_hex}")
    except BaseException:
        print("rows:", last)
        raise
    return last


def test_program_3_the_worker_pins_its_argument(ember_start):
    ctx = ember_start(num_cpus=2)
    a = ember.put(np.zeros(100_000))  # in the shared-memory store, read zero-copy
    b = spin.remote(a)
    _wait_rows(
        ctx,
        a.hex(),
        {
            ("Worker", "PINNED_IN_MEMORY"),
            ("Driver", "LOCAL_REFERENCE"),
            ("Driver", "USED_BY_PENDING_TASK"),
        },
    )
    ember.cancel(b, force=True)


def test_program_4_the_worker_holds_a_local_reference(ember_start):
    ctx = ember_start(num_cpus=2)
    a = ember.put(None)
    b = spin.remote([a])
    _wait_rows(
        ctx,
        a.hex(),
        {
            ("Worker", "LOCAL_REFERENCE"),
            ("Driver", "LOCAL_REFERENCE"),
            ("Driver", "USED_BY_PENDING_TASK"),
        },
    )
    ember.cancel(b, force=True)
