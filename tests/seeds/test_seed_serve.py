"""Ray 0.8.5's documentation, "RayServe: Scalable and Programmable Serving" (seeds/002 §5.30):
"RayServe in 90 Seconds" (a stateless function, a stateful class) and every snippet of "Key
Concepts" (endpoints, backends, ``set_traffic``, ``/-/routes``, scaling out, splitting traffic,
batching with ``@serve.accept_batch`` and ``serve.context.batch_size``), run in the order the
document shows them, as written, with ``from ember import serve`` as the only change.

The snippets are executed one after another in one namespace by a small runner, as a reader
pastes them into one Python session: the value of a snippet's last line, when it is an
expression (``requests.get(...).text``), is what the reader sees and what is asserted; a
snippet that raises is recorded and the next one runs, as in that session. Two snippets of the
document cannot succeed as printed, on 0.8.5 either: ``set_traffic("simple_backend",
{"simple_endpoint": 1.0})`` swaps the endpoint and the backend (and that endpoint was deleted
two snippets earlier), and the split names backends (``my_endpoint_backend``,
``my_endpoint_backend_class``) it never creates. Both must fail with an error that names what
is missing and how to create it; the split is then also run on the backends that exist.

The document's programs call ``http://127.0.0.1:8000`` (Serve's default port), so the runner
runs in a network namespace of its own (``unshare --net``): port 8000 is its alone, whatever
else this machine serves. Where namespaces are not allowed, it runs on the host if port 8000
is free there, and skips otherwise.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import textwrap
from collections import Counter

import pytest

# One subprocess: a local node, Serve, about ten small applications (each a replica actor).
pytestmark = pytest.mark.timeout(240)

# The document's snippets, as printed (the page break inside the second one joined up).
SNIPPETS = [
    # RayServe in 90 Seconds: a stateless function
    """
from ember import serve
import requests

serve.init()

def echo(flask_request):
    return "hello " + flask_request.args.get("name", "serve!")

serve.create_endpoint("hello", "/hello")
serve.create_backend("hello", echo)
serve.set_traffic("hello", {"hello": 1.0})

requests.get("http://127.0.0.1:8000/hello").text
""",
    # ... a stateful class
    """
from ember import serve
import requests

serve.init()

class Counter:
    def __init__(self):
        self.count = 0

    def __call__(self, flask_request):
        return {"current_counter": self.count}

serve.create_endpoint("counter", "/counter")
serve.create_backend("counter", Counter)
serve.set_traffic("counter", {"counter": 1.0})

requests.get("http://127.0.0.1:8000/counter").json()
""",
    # Key Concepts
    """
from ember import serve
serve.init() # initializes serve and Ray
""",
    """
serve.create_endpoint("simple_endpoint", "/simple")
""",
    """
serve.delete_endpoint("simple_endpoint")
""",
    """
def handle_request(flask_request):
    return "hello world"

class RequestHandler:
    def __init__(self):
        self.msg = "hello, world!"

    def __call__(self, flask_request):
        return self.msg

serve.create_backend("simple_backend", handle_request)
serve.create_backend("simple_backend_class", RequestHandler)
""",
    """
serve.set_traffic("simple_backend", {"simple_endpoint": 1.0})
""",
    """
import requests
print(requests.get("http://127.0.0.1:8000/-/routes", timeout=0.5).text)
""",
    """
serve.delete_backend("simple_backend")
""",
    """
config = {"num_replicas": 2}
serve.create_backend("my_scaled_endpoint_backend", handle_request, config=config)
""",
    """
serve.create_endpoint("endpoint_identifier_split", "/split", methods=["GET", "POST"])

# splitting traffic 70/30
serve.set_traffic("endpoint_identifier_split", {"my_endpoint_backend": 0.7, "my_endpoint_backend_class": 0.3})
""",
    """
class BatchingExample:
    def __init__(self):
        self.count = 0

    @serve.accept_batch
    def __call__(self, flask_request):
        self.count += 1
        batch_size = serve.context.batch_size
        return [self.count] * batch_size

serve.create_endpoint("counter1", "/increment")

config = {"max_batch_size": 5}
serve.create_backend("counter1", BatchingExample, config=config)
serve.set_traffic("counter1", {"counter1": 1.0})
""",
]

# After the document: what a reader would do next to see its claims hold (not the document's).
CHECKS = """
import concurrent.futures
import ember
base = "http://127.0.0.1:8000"
checks["hello_named"] = requests.get(base + "/hello", params={"name": "ember"}).text
checks["counter_again"] = requests.get(base + "/counter").json()
status = serve.status().applications["backend:my_scaled_endpoint_backend"]
checks["scaled_replicas"] = sum(
    d.replica_states.get("RUNNING", 0) for d in status.deployments.values()
)
serve.set_traffic(
    "endpoint_identifier_split", {"my_scaled_endpoint_backend": 0.7, "simple_backend_class": 0.3}
)
checks["split"] = [requests.get(base + "/split").text for _ in range(200)]
checks["split_post"] = requests.post(base + "/split", data=b"x").text
with concurrent.futures.ThreadPoolExecutor(10) as pool:
    answers = list(pool.map(lambda _: requests.get(base + "/increment"), range(10)))
checks["batched"] = [(r.status_code, r.json()) for r in answers]
"""

RUNNER = textwrap.dedent(
    """
    import ast, json, sys, traceback

    snippets, checks_code = json.load(open(sys.argv[1]))
    ns, results, checks = {"__name__": "__main__"}, [], {}

    def run(code):
        tree = ast.parse(code)
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        exec(compile(tree, "<snippet>", "exec"), ns)
        if last is not None:
            return eval(compile(ast.Expression(last.value), "<snippet>", "eval"), ns)

    try:
        for code in snippets:
            try:
                value = run(code)
                results.append({"value": value if isinstance(value, (str, dict)) else None})
            except Exception as e:
                results.append({"error": type(e).__name__, "message": str(e)})
        ns["checks"] = checks
        try:
            run(checks_code)
        except Exception:
            checks["failed"] = traceback.format_exc()
    finally:
        try:
            ns["serve"].shutdown()
        finally:
            import ember
            ember.shutdown()
    print("RESULTS " + json.dumps({"snippets": results, "checks": checks}), flush=True)
    """
)


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _own_network() -> list[str]:
    """The argv prefix that runs a command in a network namespace of its own, with loopback
    up; empty when namespaces are not allowed but port 8000 is free here."""
    if shutil.which("unshare") and shutil.which("ip"):
        probe = subprocess.run(["unshare", "--net", "true"], capture_output=True, timeout=30)
        if probe.returncode == 0:
            return ["unshare", "--net", "sh", "-c", 'ip link set lo up && exec "$@"', "sh"]
    if _port_free(8000):
        return []
    pytest.skip("port 8000 is taken and network namespaces are not allowed here")


@pytest.fixture(scope="module")
def session(tmp_path_factory) -> dict:
    work = tmp_path_factory.mktemp("seed_serve")
    (work / "snippets.json").write_text(json.dumps([SNIPPETS, CHECKS]))
    (work / "runner.py").write_text(RUNNER)
    out = subprocess.run(
        [*_own_network(), sys.executable, str(work / "runner.py"), str(work / "snippets.json")],
        capture_output=True,
        text=True,
        timeout=220,
        cwd=work,
    )
    line = next((x for x in out.stdout.splitlines() if x.startswith("RESULTS ")), None)
    assert out.returncode == 0 and line, (out.stdout[-3000:], out.stderr[-3000:])
    found = json.loads(line[len("RESULTS ") :])
    found["stdout"] = out.stdout
    assert "failed" not in found["checks"], found["checks"]["failed"]
    return found


def test_rayserve_in_90_seconds(session: dict) -> None:
    function, klass = session["snippets"][:2]
    assert function == {"value": "hello serve!"}
    assert klass == {"value": {"current_counter": 0}}
    # The Flask request the handler gets: .args.get with the document's default and without it
    assert session["checks"]["hello_named"] == "hello ember"
    assert session["checks"]["counter_again"] == {"current_counter": 0}


def test_key_concepts_endpoints_backends_and_routes(session: dict) -> None:
    snippets = session["snippets"]
    for i in (2, 3, 4, 5, 8, 9, 11):  # init, endpoints, backends, delete, scale out, batching
        assert "error" not in snippets[i], (i, snippets[i])
    swapped = snippets[6]
    assert swapped["error"] == "RayServeException"
    assert swapped["message"] == (
        "no endpoint 'simple_backend': create it with serve.create_endpoint() first"
    )
    routes_line = next(x for x in session["stdout"].splitlines() if x.startswith("{"))
    routes = json.loads(routes_line)
    assert set(routes) == {"/hello", "/counter"}  # simple_endpoint was deleted, never routed
    assert session["checks"]["scaled_replicas"] == 2


def test_splitting_traffic(session: dict) -> None:
    missing = session["snippets"][10]
    assert missing["error"] == "RayServeException"
    assert missing["message"] == (
        "no backend(s) my_endpoint_backend, my_endpoint_backend_class: "
        "create them with serve.create_backend() first"
    )
    seen = Counter(session["checks"]["split"])
    assert set(seen) == {"hello world", "hello, world!"}
    # 70/30 of 200: 140 expected, sd 6.5; 110..170 is far outside chance
    assert 110 <= seen["hello world"] <= 170, seen
    assert session["checks"]["split_post"] in ("hello world", "hello, world!")


def test_batching_with_accept_batch(session: dict) -> None:
    answers = session["checks"]["batched"]
    assert all(status == 200 for status, _ in answers), answers
    counts = [body for _, body in answers]
    # Each answer is the count of batches so far: one value per batch, at most
    # max_batch_size (5) answers per value, so 10 requests took at least 2 batches.
    per_batch = Counter(counts)
    assert max(per_batch.values()) <= 5, per_batch
    assert len(per_batch) >= 2 and sorted(per_batch) == list(range(1, len(per_batch) + 1))
