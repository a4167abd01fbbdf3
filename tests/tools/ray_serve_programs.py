"""One set of Serve programs run on Ray Serve 2.60 and on ember.serve:

    tests/tools/.ray-venv/bin/python tests/tools/ray_serve_programs.py ray
    .venv/bin/python tests/tools/ray_serve_programs.py ember

prints one JSON object on its last line: per case, what a user reads (HTTP status codes,
bodies and content types, handle results, serve.status() values, error types), with replica
ids and pids replaced so that both runtimes' answers compare equal.
``tests/serve/test_serve_ray_compare.py`` compares the two.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import random
import signal
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from typing import Any

from fastapi import FastAPI
from starlette.requests import Request


class Reply:
    """An HTTP answer (the standard library's client: Ray's environment has no httpx)."""

    def __init__(self, status: int, body: bytes, headers: Any) -> None:
        self.status_code, self.text = status, body.decode()
        self.headers = {k.lower(): v for k, v in headers.items()}

    def json(self) -> Any:
        return json.loads(self.text)


def fetch(url: str, body: Any = None, timeout: float = 30) -> Reply:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="POST" if data else "GET")
    if data:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return Reply(r.status, r.read(), r.headers)
    except urllib.error.HTTPError as e:
        return Reply(e.code, e.read(), e.headers)


def free_port() -> int:
    """As ``ember.tools.ports.free_port`` (this program also runs on Ray, without Ember): a
    port below the kernel's ephemeral range, which no other process's outgoing connection
    can take before Serve listens on it, that no address holds now."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        first_ephemeral = int(f.read().split()[0])
    while True:
        port = random.randint(10000, first_ephemeral - 1)
        with socket.socket() as s:
            try:
                s.bind(("0.0.0.0", port))
            except OSError:
                continue
            return port


def define(serve: Any) -> dict:
    """The deployments, built with the runtime's serve module."""

    @serve.deployment
    def hello(req: Any) -> str:
        name = req.query_params.get("name", "world") if isinstance(req, Request) else req
        return f"hello {name}"

    @serve.deployment(num_replicas=2)
    class Counter:
        def __init__(self, start: int) -> None:
            self.n = start

        def __call__(self, req: Request) -> dict:
            return {"n": self.n}

        def add(self, k: int) -> int:
            self.n += k
            return self.n

    @serve.deployment
    class Adder:
        def __init__(self, k: int) -> None:
            self.k = k

        def __call__(self, x: int) -> int:
            return x + self.k

    @serve.deployment
    class Pipeline:
        def __init__(self, adder: Any, k: int) -> None:
            self.adder = adder
            self.k = k

        async def __call__(self, x: int) -> int:
            return (await self.adder.remote(x)) * self.k

    api = FastAPI()

    @serve.deployment
    @serve.ingress(api)
    class Api:
        @api.get("/items/{item_id}")
        def item(self, item_id: int, q: str = "") -> dict:
            return {"id": item_id, "q": q}

        @api.post("/echo")
        async def echo(self, body: dict) -> dict:
            return {"got": body}

    @serve.deployment(max_ongoing_requests=32)
    class Batcher:
        @serve.batch(max_batch_size=16, batch_wait_timeout_s=2.0)
        async def __call__(self, xs: list) -> list:
            return [len(xs) for _ in xs]

    @serve.deployment
    class Streamer:
        def count(self, n: int):
            yield from range(n)

    @serve.deployment(user_config={"word": "one"})
    class Configured:
        def reconfigure(self, cfg: dict) -> None:
            self.word = cfg["word"]

        def __call__(self) -> tuple:
            return self.word, os.getpid()

    @serve.deployment(health_check_period_s=1, graceful_shutdown_timeout_s=1)
    class Mortal:
        async def __call__(self, req: Request) -> dict:
            await asyncio.sleep(float(req.query_params.get("s", "0")))
            return {"pid": os.getpid()}

    return locals()


def main(name: str) -> None:
    runtime = importlib.import_module(name)
    serve = importlib.import_module(f"{name}.serve")
    d = define(serve)
    runtime.init(num_cpus=16)  # logical: each replica reserves one CPU (Ray and Ember)
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    base = f"http://127.0.0.1:{port}"
    same: dict[str, Any] = {}
    own: dict[str, Any] = {}
    seconds: dict[str, float] = {}

    def case(label: str, fn: Any) -> None:
        started = time.monotonic()
        try:
            same[label] = fn()
        except Exception as e:  # noqa: BLE001 - a case that crashes is reported, not fatal
            same[label] = {"crashed": f"{type(e).__name__}: {e}"}
        seconds[label] = round(time.monotonic() - started, 1)

    serve_error = importlib.import_module(f"{name}.serve.exceptions").RayServeException

    def raised(fn: Any) -> str:
        """The error's kind as a user catches it (an error raised in the controller arrives
        wrapped in the runtime's task error, which is also an instance of it)."""
        try:
            fn()
        except serve_error:
            return "RayServeException"
        except Exception as e:  # noqa: BLE001
            return type(e).__name__
        return "no error"

    def function() -> dict:
        h = serve.run(d["hello"].bind(), name="fn", route_prefix="/fn")
        r = fetch(f"{base}/fn?name=x", timeout=30)
        return {
            "http": [r.status_code, r.text, r.headers["content-type"]],
            "handle": h.remote("y").result(),
            "sub": fetch(f"{base}/fn/a/b", timeout=30).text,
        }

    def klass() -> dict:
        h = serve.run(d["Counter"].bind(5), name="counter", route_prefix="/counter")
        r = fetch(f"{base}/counter", timeout=30)
        st = serve.status().applications["counter"]
        return {
            "http": [r.status_code, r.json(), r.headers["content-type"]],
            "add": h.add.remote(1).result() in (6,),
            "status": [
                st.status,
                st.deployments["Counter"].status,
                st.deployments["Counter"].replica_states,
            ],
        }

    def composition() -> dict:
        h = serve.run(d["Pipeline"].bind(d["Adder"].bind(1), 10), name="comp", route_prefix=None)
        adder = serve.get_deployment_handle("Adder", "comp")
        return {
            "pipeline": h.remote(4).result(),
            "passed": h.remote(adder.remote(1)).result(),
            "deployments": sorted(serve.status().applications["comp"].deployments),
        }

    def ingress() -> dict:
        serve.run(d["Api"].bind(), name="api", route_prefix="/api")
        a = fetch(f"{base}/api/items/3?q=z", timeout=30)
        b = fetch(f"{base}/api/echo", {"k": [1, 2]})
        c = fetch(f"{base}/api/items/notanint", timeout=30)
        return {
            "get": [a.status_code, a.json()],
            "post": [b.status_code, b.json()],
            "invalid": c.status_code,
            "missing": fetch(f"{base}/api/nope", timeout=30).status_code,
        }

    def batching() -> list:
        h = serve.run(d["Batcher"].bind(), name="batch", route_prefix=None)
        responses = [h.remote(i) for i in range(16)]
        return [r.result() for r in responses]

    def streaming() -> list:
        h = serve.run(d["Streamer"].bind(), name="stream", route_prefix=None)
        return list(h.options(method_name="count", stream=True).remote(5))

    def user_config() -> dict:
        h = serve.run(d["Configured"].bind(), name="cfg", route_prefix=None)
        word1, pid1 = h.remote().result()
        serve.run(
            d["Configured"].options(user_config={"word": "two"}).bind(),
            name="cfg",
            route_prefix=None,
        )
        deadline = time.monotonic() + 30
        word2, pid2 = h.remote().result()
        while word2 != "two" and time.monotonic() < deadline:
            time.sleep(0.1)
            word2, pid2 = h.remote().result()
        # Ray 2.60 gives each imperative serve.run a new code version, so its replica is
        # replaced; Ember's version is the code's hash, so user_config is applied in place
        own["user_config_same_replica"] = pid1 == pid2
        return {"words": [word1, word2]}

    def errors() -> dict:
        return {
            "unbound": raised(lambda: serve.run(d["hello"])),
            "same_prefix": raised(
                lambda: serve.run(d["hello"].bind(), name="fn_again", route_prefix="/fn")
            ),
            "no_app": raised(lambda: serve.get_app_handle("nope")),
            "no_route": fetch(f"{base}/nowhere", timeout=30).status_code,
            "fn_still": fetch(f"{base}/fn?name=z", timeout=30).text,
        }

    def killed_replica() -> dict:
        serve.run(d["Mortal"].bind(), name="mortal", route_prefix="/mortal")
        pid = fetch(f"{base}/mortal", timeout=30).json()["pid"]
        inflight: list = []
        t = threading.Thread(
            target=lambda: inflight.append(fetch(f"{base}/mortal?s=5", timeout=60))
        )
        t.start()
        time.sleep(1.0)
        os.kill(pid, signal.SIGKILL)
        t.join(60)
        deadline = time.monotonic() + 60
        new_pid = None
        while time.monotonic() < deadline:
            try:
                r = fetch(f"{base}/mortal", timeout=10)
                if r.status_code == 200:
                    new_pid = r.json()["pid"]
                    break
            except OSError:
                pass
            time.sleep(0.2)
        return {"inflight": inflight[0].status_code >= 500, "replaced": new_pid not in (None, pid)}

    def deleted() -> list:
        serve.delete("stream")
        return sorted(serve.status().applications)

    for label, fn in [
        ("function", function),
        ("class", klass),
        ("composition", composition),
        ("ingress", ingress),
        ("batching", batching),
        ("streaming", streaming),
        ("user_config", user_config),
        ("errors", errors),
        ("killed_replica", killed_replica),
        ("deleted", deleted),
    ]:
        case(label, fn)
    serve.shutdown()
    runtime.shutdown()
    print(json.dumps({"same": same, "own": own, "seconds": seconds}))


if __name__ == "__main__":
    main(sys.argv[1])
