"""GPUs in the node sample through NVML (issue 4 §1: "GPUs through NVML when present
(utilisation, memory), simply absent otherwise").

This machine has no GPU and no NVIDIA driver, so these tests put a stand-in ``pynvml`` module
on ``sys.path``: it answers the NVML calls the agent makes (``nvmlInit``,
``nvmlDeviceGetCount``, ``nvmlDeviceGetHandleByIndex``, ``nvmlDeviceGetUtilizationRates``,
``nvmlDeviceGetMemoryInfo``, ``nvmlDeviceGetName``) the way ``nvidia-ml-py`` (the ``gpu``
extra) does, with figures the test chose, or raises ``NVMLError`` as NVML does on a node
without a driver or with a GPU fallen off the bus.
"""

from __future__ import annotations

import sys

import pytest
from ember.agent.metrics import NodeSampler
from ember.dashboard.agent_hub import AgentHub, AgentLink
from ember.dashboard.state import DashboardState

FAKE_PYNVML = '''
"""Stand-in for nvidia-ml-py on a machine without a GPU (see the test module's doc)."""
import os
from types import SimpleNamespace


class NVMLError(Exception):
    pass


def _fail(where):
    if os.environ.get("FAKE_NVML_FAIL") == where:
        raise NVMLError("Driver Not Loaded" if where == "init" else "GPU is lost")


GPUS = [
    {"name": b"Fake A100", "util": 37, "used": 3 * 2**30, "total": 40 * 2**30},
    {"name": "Fake T4", "util": 0, "used": 2**20, "total": 16 * 2**30},
]


def nvmlInit():
    _fail("init")


def nvmlDeviceGetCount():
    return len(GPUS)


def nvmlDeviceGetHandleByIndex(i):
    return i


def nvmlDeviceGetUtilizationRates(h):
    _fail("read")
    return SimpleNamespace(gpu=GPUS[h]["util"], memory=5)


def nvmlDeviceGetMemoryInfo(h):
    g = GPUS[h]
    return SimpleNamespace(used=g["used"], total=g["total"], free=g["total"] - g["used"])


def nvmlDeviceGetName(h):
    return GPUS[h]["name"]
'''


@pytest.fixture
def fake_pynvml(tmp_path, monkeypatch):
    (tmp_path / "pynvml.py").write_text(FAKE_PYNVML)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    yield monkeypatch
    sys.modules.pop("pynvml", None)


def test_gpu_utilisation_and_memory_reach_the_node_sample(fake_pynvml):
    sample = NodeSampler().sample()
    assert sample["gpus"] == [
        {
            "index": 0,
            "name": "Fake A100",
            "utilization_percent": 37,
            "memory_used_bytes": 3 * 2**30,
            "memory_total_bytes": 40 * 2**30,
        },
        {
            "index": 1,
            "name": "Fake T4",
            "utilization_percent": 0,
            "memory_used_bytes": 2**20,
            "memory_total_bytes": 16 * 2**30,
        },
    ]
    # Through the dashboard's ingestion, as the agent's stream delivers it.
    state = DashboardState()
    node = "cd" * 16
    AgentHub(state).ingest(
        AgentLink(node), {"type": "metrics", "time": 1.0, "sample": sample, "workers": []}
    )
    assert state.nodes[node].metrics["gpus"][0]["utilization_percent"] == 37


def test_gpus_absent_when_nvml_cannot_start(fake_pynvml):
    fake_pynvml.setenv("FAKE_NVML_FAIL", "init")
    sample = NodeSampler().sample()
    assert "gpus" not in sample and sample["mem_total_bytes"] > 0


def test_gpus_absent_from_a_sample_whose_nvml_read_fails(fake_pynvml):
    sampler = NodeSampler()
    assert len(sampler.sample()["gpus"]) == 2
    fake_pynvml.setenv("FAKE_NVML_FAIL", "read")
    sample = sampler.sample()
    assert "gpus" not in sample and sample["cpu_per_core"]  # the rest of the sample goes out
    fake_pynvml.delenv("FAKE_NVML_FAIL")
    assert len(sampler.sample()["gpus"]) == 2


def test_no_pynvml_means_no_gpus_key(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails, as without the extra
    assert "gpus" not in NodeSampler().sample()
