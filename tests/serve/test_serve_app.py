"""Serve on one shared node: deployments over HTTP and handles, composition, FastAPI ingress,
batching, streaming, user_config, bad input, backpressure; then faults (a rolling update under
load, a SIGKILLed replica, a SIGKILLed controller). Real processes and real HTTP throughout."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import threading
import time
from pathlib import Path

import ember
import httpx
import pytest
from ember import serve
from ember.serve.names import CONTROLLER_NAME, NAMESPACE
from ember_test_utils import free_port, wait_until
from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import StreamingResponse

MAX_BODY = 64 * 1024
SESSION: dict[str, str] = {}


@pytest.fixture(scope="module")
def port(_module_node_cleanup):
    if ember.is_initialized():
        ember.shutdown()
    SESSION["dir"] = ember.init(num_cpus=32)["session_dir"]  # logical CPUs: a replica asks one
    p = free_port()
    serve.start(http_options={"port": p, "max_body_bytes": MAX_BODY})
    yield p
    serve.shutdown()


def get(port: int, path: str, **kw) -> httpx.Response:
    return httpx.get(f"http://127.0.0.1:{port}{path}", timeout=30, **kw)


def app_status(name: str) -> dict:
    controller = ember.get_actor(CONTROLLER_NAME, namespace=NAMESPACE)
    return ember.get(controller.get_status.remote(), timeout=30)["applications"][name]


# -- function and class deployments -------------------------------------------------------
@serve.deployment
def hello(request: Request) -> str:
    return f"hello {request.query_params.get('name', 'world')}"


@serve.deployment(num_replicas=2)
class Counter:
    def __init__(self, start: int) -> None:
        self.n = start

    def __call__(self, request: Request) -> dict:
        return {"n": self.n, "replica": serve.get_replica_context().replica_tag}

    def add(self, k: int) -> int:
        self.n += k
        return self.n


def test_a_function_deployment_answers_http_and_handles(port: int) -> None:
    handle = serve.run(hello.bind(), name="fn", route_prefix="/fn")
    r = get(port, "/fn?name=ember", headers={"X-Request-ID": "req-123"})
    assert (r.status_code, r.text) == (200, "hello ember")
    assert r.headers["content-type"].startswith("text/plain")
    assert r.headers["x-request-id"] == "req-123"
    assert get(port, "/fn/deeper").text == "hello world"
    assert len(get(port, "/fn").headers["x-request-id"]) == 32  # a new id when none was sent
    # the replica's log lines for that request carry its id
    pid = app_status("fn")["deployments"]["hello"]["replicas"][0]["pid"]
    logs = Path(SESSION["dir"]) / "logs"

    def logged() -> list[str]:
        return [
            line
            for f in logs.glob(f"worker-*-{pid}.*")
            for line in f.read_text(errors="replace").splitlines()
            if "request_id=req-123" in line
        ]

    lines = wait_until(logged, 10, message="the request's log line")
    assert any("GET /fn 200" in line for line in lines), lines
    # through a handle the function gets what the caller passes
    scope = {
        "type": "http",
        "method": "GET",
        "path": "/",
        "query_string": b"name=handle",
        "headers": [],
    }
    assert handle.remote(Request(scope)).result(timeout_s=30) == "hello handle"


def test_a_class_deployment_spreads_over_its_replicas(port: int) -> None:
    handle = serve.run(Counter.bind(10), name="counter", route_prefix="/counter")
    st = app_status("counter")
    assert st["status"] == "RUNNING"
    replicas = st["deployments"]["Counter"]["replicas"]
    assert [r["state"] for r in replicas] == ["RUNNING", "RUNNING"]
    seen = {get(port, "/counter").json()["replica"] for _ in range(40)}
    assert seen == {r["replica_id"] for r in replicas}  # both replicas serve
    assert handle.add.remote(5).result(timeout_s=30) == 15
    assert handle.options(method_name="add").remote(1).result(timeout_s=30) in (11, 16)
    status = serve.status().applications["counter"]
    assert status.status == "RUNNING"
    assert status.deployments["Counter"].replica_states == {"RUNNING": 2}


# -- composition ----------------------------------------------------------------------------
@serve.deployment
class Adder:
    def __init__(self, k: int) -> None:
        self.k = k

    def __call__(self, x: int) -> int:
        return x + self.k


@serve.deployment
class Multiplier:
    def __init__(self, k: int) -> None:
        self.k = k

    async def __call__(self, x: int) -> int:
        return x * self.k


@serve.deployment
class Pipeline:
    def __init__(self, adder, multiplier) -> None:
        self.adder = adder
        self.multiplier = multiplier

    async def __call__(self, request: Request) -> dict:
        x = int(request.query_params["x"])
        # the adder's response goes to the multiplier as an argument: replica to replica
        y = await self.multiplier.remote(self.adder.remote(x))
        return {"x": x, "y": y, "handles": type(self.adder).__name__}


def test_bound_deployments_become_handles_and_compose(port: int) -> None:
    handle = serve.run(
        Pipeline.bind(Adder.bind(1), Multiplier.bind(10)), name="comp", route_prefix="/comp"
    )
    assert get(port, "/comp?x=4").json() == {"x": 4, "y": 50, "handles": "DeploymentHandle"}
    assert sorted(app_status("comp")["deployments"]) == ["Adder", "Multiplier", "Pipeline"]
    # from the driver too: a response passed as an argument is not fetched by the caller
    adder = serve.get_deployment_handle("Adder", "comp")
    multiplier = serve.get_deployment_handle("Multiplier", "comp")
    assert multiplier.remote(adder.remote(2)).result(timeout_s=30) == 30
    scope = {"type": "http", "method": "GET", "path": "/", "query_string": b"x=0", "headers": []}
    assert handle.remote(Request(scope)).result(timeout_s=30)["y"] == 10

    async def concurrently() -> list[int]:
        return await asyncio.gather(*(adder.remote(i) for i in range(20)))

    assert asyncio.run(concurrently()) == [i + 1 for i in range(20)]


# -- FastAPI ingress and streaming ----------------------------------------------------------
fastapi_app = FastAPI()


@serve.deployment
@serve.ingress(fastapi_app)
class Api:
    def __init__(self) -> None:
        self.greeting = "hi"

    @fastapi_app.get("/hello")
    def hello(self, name: str) -> dict:
        return {"greeting": f"{self.greeting} {name}"}

    @fastapi_app.post("/items/{item_id}")
    async def put_item(self, item_id: int, body: dict) -> dict:
        return {"id": item_id, "body": body}

    @fastapi_app.get("/stream")
    def stream(self) -> StreamingResponse:
        def numbers():
            for i in range(5):
                yield f"{i}\n"
                time.sleep(0.05)

        return StreamingResponse(numbers(), media_type="text/plain")

    def count(self, n: int):
        yield from range(n)


def test_fastapi_ingress_serves_the_apps_routes(port: int) -> None:
    handle = serve.run(Api.bind(), name="api", route_prefix="/api")
    assert get(port, "/api/hello", params={"name": "ember"}).json() == {"greeting": "hi ember"}
    r = httpx.post(f"http://127.0.0.1:{port}/api/items/7", json={"a": 1}, timeout=30)
    assert (r.status_code, r.json()) == (200, {"id": 7, "body": {"a": 1}})
    bad = get(port, "/api/hello")  # FastAPI's own validation error
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["query", "name"]
    assert get(port, "/api/nope").status_code == 404
    with httpx.stream("GET", f"http://127.0.0.1:{port}/api/stream", timeout=30) as r:
        chunks = list(r.iter_text())
    assert "".join(chunks) == "0\n1\n2\n3\n4\n"
    # a streaming handle call yields items as the generator makes them
    assert list(handle.options(method_name="count", stream=True).remote(4)) == [0, 1, 2, 3]


# -- batching -------------------------------------------------------------------------------
@serve.deployment(max_ongoing_requests=32)
class Batcher:
    @serve.batch(max_batch_size=16, batch_wait_timeout_s=2.0)
    async def __call__(self, xs: list[int]) -> list[tuple[int, int]]:
        return [(x, len(xs)) for x in xs]


def test_batching_forms_a_batch_of_16(port: int) -> None:
    handle = serve.run(Batcher.bind(), name="batch", route_prefix=None)
    responses = [handle.remote(i) for i in range(16)]
    results = [r.result(timeout_s=30) for r in responses]
    assert results == [(i, 16) for i in range(16)]


# -- user_config ----------------------------------------------------------------------------
@serve.deployment(user_config={"greeting": "hello"})
class Greeter:
    def reconfigure(self, config: dict) -> None:
        self.greeting = config["greeting"]

    def __call__(self, name: str) -> dict:
        return {
            "text": f"{self.greeting} {name}",
            "replica": serve.get_replica_context().replica_tag,
        }


def test_user_config_is_applied_without_a_restart(port: int) -> None:
    handle = serve.run(Greeter.bind(), name="greet", route_prefix=None)
    first = handle.remote("a").result(timeout_s=30)
    assert first["text"] == "hello a"
    serve.run(
        Greeter.options(user_config={"greeting": "hey"}).bind(), name="greet", route_prefix=None
    )
    wait_until(
        lambda: handle.remote("b").result(timeout_s=30)["text"] == "hey b",
        30,
        message="new user_config",
    )
    assert (
        handle.remote("c").result(timeout_s=30)["replica"] == first["replica"]
    )  # the same replica


# -- bad input ------------------------------------------------------------------------------
@serve.deployment
class Broken:
    def __init__(self) -> None:
        raise RuntimeError("cannot load the model weights")


def test_bad_input_is_a_clear_error_and_disturbs_nothing(port: int) -> None:
    serve.run(hello.bind(), name="fn", route_prefix="/fn")
    with pytest.raises(
        serve.RayServeException, match="route prefix '/fn' is already used by application 'fn'"
    ):
        serve.run(hello.bind(), name="other", route_prefix="/fn")
    with pytest.raises(serve.RayServeException, match="cannot load the model weights"):
        serve.run(Broken.bind(), name="broken", route_prefix="/broken", _timeout_s=60)
    assert app_status("broken")["status"] == "DEPLOY_FAILED"
    serve.delete("broken")
    with pytest.raises(TypeError, match=r"call \.bind\(\) on deployment 'hello' first"):
        serve.run(hello)
    with pytest.raises(ValueError, match="unknown http_options field"):
        serve.start(http_options={"prot": 1})
    assert get(port, "/fn?name=still").text == "hello still"  # nothing disturbed
    r = get(port, "/nowhere")
    assert r.status_code == 404 and "Path '/nowhere' not found" in r.text
    big = httpx.post(f"http://127.0.0.1:{port}/fn", content=b"x" * (MAX_BODY + 1), timeout=30)
    assert big.status_code == 413 and f"limit of {MAX_BODY} bytes" in big.text
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        assert s.recv(100).startswith(b"HTTP/1.1 400")
    assert get(port, "/fn?name=after").text == "hello after"  # the proxy lives on


@serve.deployment(max_ongoing_requests=1, max_queued_requests=1)
class Slow:
    async def __call__(self, request: Request) -> str:
        await asyncio.sleep(2)
        return "done"


def test_a_full_deployment_answers_503(port: int) -> None:
    serve.run(Slow.bind(), name="slow", route_prefix="/slow")
    results: list[httpx.Response] = []

    def call() -> None:
        results.append(get(port, "/slow"))

    threads = [threading.Thread(target=call) for _ in range(3)]
    for t in threads:
        t.start()
        time.sleep(0.2)
    for t in threads:
        t.join(30)
    codes = sorted(r.status_code for r in results)
    assert codes == [200, 200, 503], [r.text for r in results]
    rejected = next(r for r in results if r.status_code == 503)
    assert "deployment 'Slow' of application 'slow' is overloaded" in rejected.text
    serve.delete("slow")


@serve.deployment(
    max_ongoing_requests=10,
    autoscaling_config={
        "min_replicas": 1,
        "max_replicas": 3,
        "target_ongoing_requests": 1,
        "upscale_delay_s": 0.5,
        "downscale_delay_s": 1,
    },
)
class Elastic:
    async def __call__(self, request: Request) -> str:
        await asyncio.sleep(float(request.query_params.get("s", "0")))
        return "ok"


def test_autoscaling_follows_ongoing_requests(port: int) -> None:
    serve.run(Elastic.bind(), name="elastic", route_prefix="/elastic")

    def running() -> int:
        replicas = app_status("elastic")["deployments"]["Elastic"]["replicas"]
        return sum(r["state"] == "RUNNING" for r in replicas)

    assert running() == 1
    threads = [threading.Thread(target=get, args=(port, "/elastic?s=6")) for _ in range(3)]
    for t in threads:
        t.start()
    wait_until(lambda: running() == 3, 30, message="3 replicas for 3 ongoing requests")
    for t in threads:
        t.join(30)
    wait_until(lambda: running() == 1, 30, message="back to min_replicas when idle")
    decisions = ember.get(
        ember.get_actor(CONTROLLER_NAME, namespace=NAMESPACE).get_decisions.remote()
    )
    scaled = [d["message"] for d in decisions if d["kind"] == "scaled" and d["app"] == "elastic"]
    assert scaled[0].startswith("1 -> ") and "ongoing requests" in scaled[0]
    assert " -> 1 replicas" in scaled[-1]
    serve.delete("elastic")


# -- faults ---------------------------------------------------------------------------------
@serve.deployment(num_replicas=2, graceful_shutdown_wait_loop_s=0.3)
class Versioned:
    def __init__(self, version: str) -> None:
        self.version = version

    async def __call__(self, request: Request) -> str:
        await asyncio.sleep(0.01)
        return self.version


def test_a_rolling_update_under_load_fails_no_request(port: int) -> None:
    serve.run(Versioned.bind("v1"), name="roll", route_prefix="/roll")
    results: list[tuple[int, str]] = []
    stop = threading.Event()

    def load() -> None:
        with httpx.Client(timeout=30) as c:
            while not stop.is_set():
                try:
                    r = c.get(f"http://127.0.0.1:{port}/roll")
                    results.append((r.status_code, r.text))
                except httpx.HTTPError as e:
                    results.append((0, repr(e)))

    workers = [threading.Thread(target=load) for _ in range(4)]
    for w in workers:
        w.start()
    try:
        wait_until(lambda: len(results) > 20, 30, message="load before the update")
        old = {r["replica_id"] for r in app_status("roll")["deployments"]["Versioned"]["replicas"]}
        serve.run(Versioned.bind("v2"), name="roll", route_prefix="/roll")
        wait_until(
            lambda: all(
                r["version"] == app_status("roll")["deployments"]["Versioned"]["version"]
                for r in app_status("roll")["deployments"]["Versioned"]["replicas"]
            ),
            60,
            message="old replicas gone",
        )
        count = len(results)
        wait_until(lambda: len(results) > count + 20, 30, message="load after the update")
    finally:
        stop.set()
        for w in workers:
            w.join(30)
    failures = [r for r in results if r[0] != 200]
    assert failures == []
    texts = [t for _, t in results]
    assert texts[0] == "v1" and texts[-1] == "v2" and set(texts) == {"v1", "v2"}
    assert len(old) == 2
    now = {r["replica_id"] for r in app_status("roll")["deployments"]["Versioned"]["replicas"]}
    assert len(now) == 2 and not now & old
    decisions = ember.get(
        ember.get_actor(CONTROLLER_NAME, namespace=NAMESPACE).get_decisions.remote()
    )
    assert any(d["kind"] == "updated" and "rolling update" in d["message"] for d in decisions)
    serve.delete("roll")


@serve.deployment(health_check_period_s=1)
class Sleepy:
    async def __call__(self, request: Request) -> dict:
        await asyncio.sleep(float(request.query_params.get("s", "0")))
        return {"pid": os.getpid()}


def test_a_killed_replica_fails_its_requests_clearly_and_is_replaced(port: int) -> None:
    serve.run(Sleepy.bind(), name="sleepy", route_prefix="/sleepy")
    pid = get(port, "/sleepy").json()["pid"]
    inflight: list[httpx.Response] = []
    t = threading.Thread(target=lambda: inflight.append(get(port, "/sleepy?s=10")))
    t.start()
    wait_until(
        lambda: (
            ember.get(
                ember.get_actor(
                    app_status("sleepy")["deployments"]["Sleepy"]["replicas"][0]["actor_name"],
                    namespace=NAMESPACE,
                ).get_num_ongoing_requests.remote()
            )
            == 1
        ),
        10,
        message="the slow request running",
    )
    os.kill(pid, signal.SIGKILL)
    t.join(30)
    assert inflight[0].status_code == 500
    assert "the replica handling this request died" in inflight[0].text
    new_pid = wait_until(lambda: _pid_or_none(port), 60, message="a replacement replica")
    assert new_pid != pid
    decisions = ember.get(
        ember.get_actor(CONTROLLER_NAME, namespace=NAMESPACE).get_decisions.remote()
    )
    assert any(d["kind"] == "replaced" and d["app"] == "sleepy" for d in decisions)
    serve.delete("sleepy")


def _pid_or_none(port: int) -> int | None:
    r = get(port, "/sleepy")
    return r.json()["pid"] if r.status_code == 200 else None


def test_a_killed_controller_restarts_and_routing_resumes(port: int) -> None:
    serve.run(Counter.bind(0), name="counter", route_prefix="/counter")
    controller = ember.get_actor(CONTROLLER_NAME, namespace=NAMESPACE)
    before = ember.get(controller.get_status.remote())
    pid = before["controller"]["pid"]
    replicas = {  # the routable ones (one of the previous version may still be draining)
        r["replica_id"]
        for r in before["applications"]["counter"]["deployments"]["Counter"]["replicas"]
        if r["state"] == "RUNNING"
    }
    os.kill(pid, signal.SIGKILL)
    assert get(port, "/counter").status_code == 200  # the proxy routes meanwhile

    def restarted() -> dict | None:
        try:
            st = ember.get(
                ember.get_actor(CONTROLLER_NAME, namespace=NAMESPACE).get_status.remote(), timeout=5
            )
        except Exception:
            return None
        return st if st["controller"]["pid"] != pid and "counter" in st["applications"] else None

    after = wait_until(restarted, 60, message="the restarted controller")
    counter = after["applications"]["counter"]["deployments"]["Counter"]
    assert replicas <= {r["replica_id"] for r in counter["replicas"]}  # adopted, not restarted
    wait_until(lambda: app_status("counter")["status"] == "RUNNING", 30, message="counter running")
    assert {get(port, "/counter").json()["replica"] for _ in range(30)} == replicas
    serve.run(hello.bind(), name="fn2", route_prefix="/fn2")  # and it takes new work
    assert get(port, "/fn2?name=x").text == "hello x"
