"""The Kubernetes manifests in deploy/kubernetes/ are valid Kubernetes objects: each document
checked offline against the Kubernetes API's own schemas (``kubernetes-validate``, strict:
an unknown field is an error), and they fit together as a cluster (the Service selects the
head's pods, the workers join that Service at the head's GCS port, every pod has the token)."""

from __future__ import annotations

import pytest
import yaml
from ember_test_utils import REPO_ROOT

kubernetes_validate = pytest.importorskip("kubernetes_validate")

MANIFESTS = REPO_ROOT / "deploy" / "kubernetes"
K8S_VERSION = "1.30"  # a version the validator ships schemas for; the manifests use stable APIs


def _documents() -> list[dict]:
    docs = []
    for path in sorted(MANIFESTS.glob("*.yaml")):
        with open(path) as f:
            docs += [d for d in yaml.safe_load_all(f) if d]
    return docs


def test_every_manifest_is_a_valid_kubernetes_object() -> None:
    docs = _documents()
    assert sorted((d["kind"], d["metadata"]["name"]) for d in docs) == [
        ("Deployment", "ember-head"),
        ("Deployment", "ember-worker"),
        ("Namespace", "ember"),
        ("Service", "ember-head"),
    ]
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)  # raises on any error


def test_a_wrong_field_is_caught_by_the_same_check() -> None:
    (worker,) = [d for d in _documents() if d["metadata"]["name"] == "ember-worker"]
    worker["spec"]["replicas"] = "three"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(worker, K8S_VERSION, strict=True)


def test_the_objects_fit_together_as_one_cluster() -> None:
    by_name = {(d["kind"], d["metadata"]["name"]): d for d in _documents()}
    service = by_name[("Service", "ember-head")]
    head = by_name[("Deployment", "ember-head")]["spec"]
    worker = by_name[("Deployment", "ember-worker")]["spec"]
    assert head["replicas"] == 1
    assert service["spec"]["selector"] == head["template"]["metadata"]["labels"]
    assert service["spec"]["selector"] != worker["template"]["metadata"]["labels"]
    gcs_port = next(p["port"] for p in service["spec"]["ports"] if p["name"] == "gcs")
    (head_c,) = head["template"]["spec"]["containers"]
    (worker_c,) = worker["template"]["spec"]["containers"]
    assert f"--port={gcs_port}" in head_c["args"]
    assert f"--address=ember-head:{gcs_port}" in worker_c["args"]
    for container in (head_c, worker_c):
        assert "--block" in container["args"]  # the pod lives as long as its node
        env = {e["name"]: e for e in container["env"]}
        ref = env["EMBER_TOKEN"]["valueFrom"]["secretKeyRef"]
        assert (ref["name"], ref["key"]) == ("ember-cluster-token", "token")
        assert not any("token" in a for a in container["args"])  # never on a command line
        assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
