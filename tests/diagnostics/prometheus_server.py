"""Debian's ``prometheus`` and ``promtool`` for the tests: found or skipped (failed in CI,
naming the fix), a server started on loopback with its own data dir and stopped (and waited
for) whatever happened, and its HTTP query API."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
from ember_test_utils import free_port, wait_until

FIX = "run scripts/dev.sh setup (it installs Debian's prometheus, which has promtool)"


def tool(name: str) -> str:
    """The tool's path; skips the test without it, or fails it in CI (``CI=true``), where a
    skip would pass a run that checked nothing."""
    path = shutil.which(name)
    if path is not None:
        return path
    if os.environ.get("CI", "").lower() in ("true", "1"):
        pytest.fail(f"{name} is missing: {FIX}", pytrace=False)
    pytest.skip(f"{name} is missing: {FIX}")


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


def query(url: str, promql: str) -> list[dict]:
    """An instant query's result vector (``[]`` when it selects nothing)."""
    q = urllib.parse.urlencode({"query": promql})
    body = get_json(f"{url}/api/v1/query?{q}")
    assert body["status"] == "success", body
    return body["data"]["result"]


class PrometheusServers:
    """``start(scrape_configs)`` runs a Prometheus scraping every second with these scrape
    configs (YAML under ``scrape_configs:``) and returns its URL once it is ready."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.procs: list[subprocess.Popen] = []

    def start(self, scrape_configs: str) -> str:
        binary = tool("prometheus")
        port = free_port()
        config = self.tmp_path / "prometheus.yml"
        config.write_text(
            "global:\n"
            "  scrape_interval: 1s\n"
            "  scrape_timeout: 1s\n"
            "scrape_configs:\n" + scrape_configs
        )
        log_path = self.tmp_path / "prometheus.log"
        with open(log_path, "w") as log:  # the child has its own copy of the descriptor
            self.procs.append(
                subprocess.Popen(
                    [
                        binary,
                        f"--config.file={config}",
                        f"--storage.tsdb.path={self.tmp_path / 'data'}",
                        f"--web.listen-address=127.0.0.1:{port}",
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
        url = f"http://127.0.0.1:{port}"
        proc = self.procs[-1]

        def ready() -> bool:
            assert proc.poll() is None, log_path.read_text()[-3000:]
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as resp:
                    return resp.status == 200
            except OSError:
                return False

        wait_until(ready, timeout=30, interval=0.2, message="Prometheus to be ready")
        return url

    def stop(self) -> None:
        for p in self.procs:
            p.terminate()
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)
        self.procs.clear()


def file_sd_job(name: str, sd_file: str, params: dict[str, str] | None = None) -> str:
    """A scrape job over Ember's service-discovery file, with URL parameters if any."""
    text = f"  - job_name: {name}\n    file_sd_configs:\n      - files: ['{sd_file}']\n"
    text += "        refresh_interval: 1s\n"
    if params:
        text += "    params:\n"
        text += "".join(f"      {k}: ['{v}']\n" for k, v in params.items())
    return text
