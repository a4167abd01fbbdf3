"""``import ember`` loads its public names on first use (PEP 562), so the node's own
processes do not carry the driver API; every public name still resolves."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _modules_after(statement: str) -> set[str]:
    code = (
        f"{statement}\nimport sys\nprint(' '.join(m for m in sys.modules if m.startswith('ember')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    return set(out.stdout.split())


@pytest.mark.parametrize(
    "component", ["ember.gcs.server", "ember.raylet.raylet", "ember.agent.agent"]
)
def test_node_processes_do_not_load_the_driver_api(component: str) -> None:
    loaded = _modules_after(f"import {component}")
    assert component in loaded
    assert not loaded & {"ember.api", "ember.actor", "ember.core_worker.core_worker"}, loaded


def test_every_public_name_resolves() -> None:
    import ember
    import ember.util

    for module in (ember, ember.util):
        assert sorted(module.__all__) == sorted(module._PUBLIC)
        for name in module.__all__:
            assert getattr(module, name) is not None, name
            assert name in dir(module)


def test_unknown_name_is_an_attribute_error() -> None:
    import ember

    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        ember.no_such_name  # noqa: B018
    assert not hasattr(ember.util, "no_such_name")


def test_plain_function_hint_is_installed_by_import_alone() -> None:
    code = (
        "import ember\n"
        "def f():\n    pass\n"
        "try:\n    f.remote()\nexcept TypeError as e:\n    print(e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert "@ember.remote" in out.stdout
