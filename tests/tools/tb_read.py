"""Reads trial directories' TensorBoard event files with TensorBoard's own reader (run in the
judge venv, tests/tools/.ray-venv, where ``tensorboard`` is installed; never Ember's).

    python tb_read.py DIR...   ->  one JSON object on stdout: per directory, its event file
    count, every scalar tag with its (step, value) points, and the hparams TensorBoard's
    hparams plugin reads (the hyperparameters and the metric tags)."""

from __future__ import annotations

import json
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2


def hparams_of(acc: EventAccumulator) -> dict:
    try:
        contents = acc.PluginTagToContent("hparams")
    except KeyError:  # no hparams in this file (a trial still running, or a restarted run)
        contents = {}
    out: dict = {"hparams": {}, "metrics": []}
    for content in contents.values():
        data = plugin_data_pb2.HParamsPluginData.FromString(content)
        if data.HasField("session_start_info"):
            for name, value in data.session_start_info.hparams.items():
                kind = value.WhichOneof("kind")
                out["hparams"][name] = getattr(value, kind) if kind else None
        if data.HasField("experiment"):
            out["metrics"] = sorted(m.name.tag for m in data.experiment.metric_infos)
    return out


def read(directory: str) -> dict:
    import glob
    import os

    files = sorted(glob.glob(os.path.join(directory, "events.out.tfevents.*")))
    scalars: dict = {}
    histograms: dict = {}  # {tag: [[step, count, max], ...]}
    hparams: dict = {"hparams": {}, "metrics": []}
    for path in files:
        acc = EventAccumulator(path, size_guidance={"scalars": 0, "tensors": 0, "histograms": 0})
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            scalars.setdefault(tag, []).extend([e.step, e.value] for e in acc.Scalars(tag))
        for tag in acc.Tags()["histograms"]:
            histograms.setdefault(tag, []).extend(
                [e.step, e.histogram_value.num, e.histogram_value.max] for e in acc.Histograms(tag)
            )
        found = hparams_of(acc)
        if found["hparams"] or found["metrics"]:
            hparams = found
    return {"files": len(files), "scalars": scalars, "histograms": histograms, **hparams}


if __name__ == "__main__":
    print(json.dumps({d: read(d) for d in sys.argv[1:]}))
