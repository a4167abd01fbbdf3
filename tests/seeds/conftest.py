"""Shared set-up for the seed-document programs (tests/seeds).

Each test is one program from the Ray 0.8.5 documentation (seeds/002), run with
``import ember as ray`` as its only change. The rules kept here:

- Every test starts and ends with no runtime running: ``clean_runtime`` (autouse) shuts down
  anything a previous test left behind and shuts down after the test, even if it failed.
- Programs that call ``ray.init()`` themselves keep doing so; programs that the document
  shows *after* an ``init`` take the ``ray_start`` fixture, whose arguments come from the
  ``ray_init`` marker: ``@pytest.mark.ray_init(num_cpus=4, num_gpus=2)``.
- State changes are awaited by polling with a deadline (the ``wait_for`` fixture), never
  by sleeping a fixed time.
- What a program prints is read with the ``printed`` fixture, which drops the lines the
  runtime itself streams to the driver's stdout (worker logs and notices such as
  "(pid=...) ..." or "(raylet) A worker died ...").
- While the runtime is still being written (``ember.init`` does not exist), every test in
  this folder is skipped with the reason "runtime not built yet".
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import ember as ray
import pytest
from ember_test_utils import wait_until

SEEDS_DIR = Path(__file__).parent
RUNTIME_BUILT = callable(getattr(ray, "init", None))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "ray_init(**kwargs): arguments the ray_start fixture passes to ray.init()"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if RUNTIME_BUILT:
        return
    skip = pytest.mark.skip(reason="runtime not built yet")
    for item in items:
        # This hook sees the whole session: only touch the tests in this folder.
        if SEEDS_DIR in Path(str(item.path)).parents:
            item.add_marker(skip)


def _shutdown_quietly() -> None:
    is_initialized = getattr(ray, "is_initialized", None)
    if is_initialized is not None and not is_initialized():
        return
    shutdown = getattr(ray, "shutdown", None)
    if shutdown is not None:
        shutdown()


@pytest.fixture(autouse=True)
def clean_runtime() -> Iterator[None]:
    """No runtime before the test; shut down after it, pass or fail."""
    _shutdown_quietly()
    try:
        yield
    finally:
        _shutdown_quietly()


@pytest.fixture
def ray_start(request: pytest.FixtureRequest, clean_runtime: None) -> Iterator[Any]:
    """``ray.init(**kwargs)`` from the test's ``ray_init`` marker (default: no arguments)."""
    marker = request.node.get_closest_marker("ray_init")
    kwargs = dict(marker.kwargs) if marker is not None else {}
    info = ray.init(**kwargs)
    try:
        yield info
    finally:
        ray.shutdown()


def _wait_for(
    predicate: Callable[[], Any], timeout: float = 20.0, interval: float = 0.05, what: str = ""
) -> Any:
    return wait_until(predicate, timeout=timeout, interval=interval, message=what)


@pytest.fixture
def wait_for() -> Callable[..., Any]:
    """``wait_for(predicate, timeout=20, what="...")``: polls until ``predicate()`` is truthy
    and returns that value; fails the test at the deadline. Never sleep for a state change."""
    return _wait_for


def _program_lines(out: str) -> list[str]:
    lines = []
    for line in out.splitlines():
        text = line.strip()
        # Runtime-streamed lines start with a "(pid=...)"/"(raylet)" tag, often coloured.
        if not text or text.startswith(("(", "\x1b[")):
            continue
        lines.append(text)
    return lines


@pytest.fixture
def printed(capsys: pytest.CaptureFixture[str]) -> Callable[[], list[str]]:
    """``printed()``: the lines the program printed on the driver since the last call."""
    return lambda: _program_lines(capsys.readouterr().out)
