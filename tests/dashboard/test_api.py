"""The REST API in-process: paging, filtering before the limit, errors, token, prefix, stream."""

from __future__ import annotations

import re

import pytest
from dashboard_state_fill import NODE, TestClient, fill
from ember.dashboard.app import DashboardContext, create_app
from ember.dashboard.state import DashboardState


def test_lists_page_and_report_total(client):
    out = client.get("/api/tasks", params={"limit": 10, "offset": 5}).json()
    assert out["total"] == 300 and len(out["items"]) == 10 and out["offset"] == 5
    # newest first
    assert out["items"][0]["task_id"] == f"{294:032x}"


def test_filter_before_limit_finds_rare_rows(client):
    # Ray #33547: a cap before the filter returns nothing; here the 3 rare ones come back.
    out = client.get("/api/tasks", params={"filter": "name=rare", "limit": 100}).json()
    assert out["total"] == 3 and {r["state"] for r in out["items"]} == {"FAILED"}
    out = client.get("/api/tasks", params=[("filter", "state=FAILED"), ("filter", "name=rare")])
    assert out.json()["total"] == 3


def test_actor_list_filters_and_sorts(client):
    out = client.get(
        "/api/actors", params={"filter": "state=DEAD", "sort_by": "pid", "descending": "true"}
    ).json()
    assert out["total"] == 3 and [r["pid"] for r in out["items"]] == [1029, 1019, 1009]
    out = client.get("/api/actors", params={"filter": "class_name!=Counter", "limit": 2}).json()
    assert out["total"] == 10 and len(out["items"]) == 2


def test_detail_endpoints(client):
    node = client.get(f"/api/nodes/{NODE[:8]}").json()  # a prefix works
    assert node["node_id"] == NODE and node["workers"][0]["pid"] == 11
    assert node["metrics"]["cpu_percent"] == 12.0
    task = client.get(f"/api/tasks/{7:032x}").json()
    assert task["state"] == "FAILED" and task["error"] == "boom"
    assert [e["state"] for e in task["events"]][0] == "PENDING_ARGS_AVAIL"
    actor = client.get("/api/actors/c5").json()  # a live actor's name works
    assert actor["actor_id"] == f"{5:032x}"
    summary = client.get("/api/tasks/summary").json()
    assert summary["by_state"] == {"FINISHED": 297, "FAILED": 3}
    status = client.get("/api/cluster_status").json()
    assert status["tasks"]["FAILED"] == 3 and status["actors"] == {"ALIVE": 27, "DEAD": 3}
    hist = client.get("/api/history", params={"node_id": NODE}).json()
    assert hist["samples"][0]["cpu_percent"] == 12.0 and hist["window_s"] == 1800


def test_task_summary_of_one_job(state, client):
    from ember.dashboard.agent_hub import AgentHub, AgentLink

    # A second job's tasks: 2 of "step" finished, 1 running; the fill's job keeps its own.
    events = [
        [f"{1000 + i:032x}", "PENDING_ARGS_AVAIL", 5.0, 0, {"name": "step"}] for i in range(3)
    ]
    events += [[f"{1000 + i:032x}", "FINISHED", 6.0, 0, {"pid": 11}] for i in range(2)]
    events += [[f"{1002:032x}", "RUNNING", 6.0, 0, {"pid": 11}]]
    AgentHub(state).ingest(
        AgentLink(NODE),
        {"type": "task_events", "job_id": "02000000", "events": events, "dropped": 0},
    )
    one = client.get("/api/tasks/summary", params={"job_id": "02000000"}).json()
    assert one["total"] == 3 and one["by_state"] == {"FINISHED": 2, "RUNNING": 1}
    assert one["by_function"] == [
        {"name": "step", "total": 3, "states": {"FINISHED": 2, "RUNNING": 1}}
    ]
    first = client.get("/api/tasks/summary", params={"job_id": "01000000"}).json()
    assert first["by_state"] == {"FINISHED": 297, "FAILED": 3}
    assert {f["name"] for f in first["by_function"]} == {"common", "rare"}
    everything = client.get("/api/tasks/summary").json()
    assert everything["total"] == 303
    none = client.get("/api/tasks/summary", params={"job_id": "09000000"}).json()
    assert none["total"] == 0 and none["by_function"] == []


def test_unknown_ids_are_404_naming_the_id(client):
    for path, ident in [
        ("/api/nodes/ffffffff", "ffffffff"),
        ("/api/actors/nosuch", "nosuch"),
        ("/api/tasks/deadbeef", "deadbeef"),
    ]:
        r = client.get(path)
        assert r.status_code == 404 and ident in r.json()["detail"]
    r = client.post("/api/actors/nosuchactor/kill")
    assert r.status_code == 404 and "nosuchactor" in r.json()["detail"]


def test_malformed_parameters_are_422_naming_the_field(client):
    r = client.get("/api/tasks", params={"limit": "many"})
    assert r.status_code == 422 and "limit" in r.json()["message"]
    r = client.get("/api/tasks", params={"limit": 0})
    assert r.status_code == 422
    r = client.get("/api/actors", params={"filter": "colour=red"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "filter"]
    assert "colour" in r.json()["detail"][0]["msg"]
    r = client.get("/api/actors", params={"sort_by": "colour"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["query", "sort_by"]


def test_killing_a_dead_actor_answers_clearly(client):
    r = client.post(f"/api/actors/{9:032x}/kill")
    assert r.status_code == 200
    assert r.json()["ok"] is False and "already dead" in r.json()["message"]


def test_agent_backed_endpoints_say_what_is_missing(client):
    r = client.get("/api/logs/tail", params={"node_id": NODE, "name": "raylet.log"})
    assert r.status_code == 503 and "agent" in r.json()["detail"]
    r = client.get("/api/logs/tail", params={"node_id": NODE, "name": "nope.log"})
    assert r.status_code == 404 and "nope.log" in r.json()["detail"]


def test_token_required_off_loopback():
    st = DashboardState()
    fill(st, 5, 1)
    app = create_app(DashboardContext(state=st, host="0.0.0.0"), token="s3cret")
    with TestClient(app) as c:
        r = c.get("/api/version")
        assert r.status_code == 401 and "Authorization: Bearer" in r.json()["detail"]
        assert c.get("/api/version", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert c.get("/api/version", headers={"Authorization": "Bearer s3cret"}).status_code == 200
        assert c.get("/api/version?token=s3cret").status_code == 200
        assert c.get("/api/version", headers={"Cookie": "ember_token=s3cret"}).status_code == 200
        # A cluster's dashboard uses the cluster token: the 401 names its file and variable.
        said = r.json()["detail"]
        assert "<session_dir>/cluster_token on the head" in said and "EMBER_TOKEN" in said
        assert "dashboard_token" not in said
        # The spec declares the token, so Swagger UI's Authorize button and clients send it.
        spec = c.get("/openapi.json?token=s3cret").json()
        bearer = spec["components"]["securitySchemes"]["bearerToken"]
        assert bearer["type"] == "http" and bearer["scheme"] == "bearer"
        assert {"bearerToken": []} in spec["security"]
        query = spec["components"]["securitySchemes"]["tokenQuery"]
        assert query == {"type": "apiKey", "in": "query", "name": "token"}


def test_no_token_no_security_scheme(client):
    # On loopback the dashboard asks for nothing, and its spec must not claim it does.
    spec = client.get("/openapi.json").json()
    assert "securitySchemes" not in spec.get("components", {}) and "security" not in spec


def test_401_names_where_this_dashboard_got_its_token(monkeypatch):
    from ember.dashboard import server

    monkeypatch.delenv("EMBER_TOKEN", raising=False)
    assert "cluster_token" in server.token_place("0.0.0.0", "/s/cluster_token")
    assert "dashboard_token" in server.token_place("0.0.0.0", None)
    monkeypatch.setenv("EMBER_TOKEN", "abc123")
    place = server.token_place("0.0.0.0", None)
    assert "EMBER_TOKEN" in place
    st = DashboardState()
    app = create_app(DashboardContext(state=st, host="0.0.0.0"), token="abc123", token_place=place)
    with TestClient(app) as c:
        said = c.get("/api/version").json()["detail"]
        assert "the EMBER_TOKEN the dashboard was started with" in said


@pytest.mark.parametrize("strip", [False, True])
def test_url_prefix_with_and_without_a_stripping_proxy(strip):
    st = DashboardState()
    fill(st, 5, 1)
    app = create_app(DashboardContext(state=st, prefix="/ember"))
    with TestClient(app) as c:
        path = "/api/nodes" if strip else "/ember/api/nodes"
        assert c.get(path).json()["total"] == 1
        docs = c.get("/ember/docs")
        assert docs.status_code == 200 and "/ember/openapi.json" in docs.text


@pytest.mark.parametrize("prefix", ["", "/ember"])
def test_docs_pages_load_only_local_assets(prefix):
    # /docs must work on a cluster without internet: every script, style and icon it names is
    # served by the dashboard itself, under the prefix, even off loopback with a token.
    st = DashboardState()
    fill(st, 5, 1)
    app = create_app(DashboardContext(state=st, prefix=prefix, host="0.0.0.0"), token="s3cret")
    with TestClient(app) as c:
        for page, kinds in [("/docs", {"js", "css", "png"}), ("/redoc", {"js", "png"})]:
            html = c.get(f"{prefix}{page}?token=s3cret")
            assert html.status_code == 200
            urls = re.findall(r"""(?:src|href|url)\s*[=:]\s*['"]([^'"]+)['"]""", html.text)
            assert urls and not [u for u in urls if "//" in u], urls  # no CDN, no other host
            assets = [u for u in urls if u.startswith(f"{prefix}/docs/static/")]
            assert {u.rsplit(".", 1)[1] for u in assets} == kinds
            assert f"{prefix}/openapi.json?token=s3cret" in urls
            for url in assets:
                r = c.get(url)  # no token: a browser sends none for these
                assert r.status_code == 200, url
                kind = url.rsplit(".", 1)[1]
                ctype = {"js": "javascript", "css": "text/css", "png": "image/png"}[kind]
                assert ctype in r.headers["content-type"]
                if kind == "js":
                    assert "SwaggerUIBundle" in r.text or "Redoc" in r.text
                if kind == "css":
                    assert ".swagger-ui" in r.text
        assert c.get(f"{prefix}/docs/static/../../app.py").status_code in (401, 404)
        assert c.get(f"{prefix}/docs/static/nosuch.js").status_code == 404
        assert c.get(f"{prefix}/api/version").status_code == 401  # the API still needs it


def test_forwarded_prefix_header(client):
    r = client.get("/proxy/api/version", headers={"X-Forwarded-Prefix": "/proxy"})
    assert r.status_code == 200 and r.json()["api"] == 1


def test_frontend_served_from_its_directory(tmp_path, state):
    (tmp_path / "index.html").write_text("<html>ember app</html>")
    (tmp_path / "app.js").write_text("console.log(1)")
    app = create_app(DashboardContext(state=state, frontend_dir=str(tmp_path)))
    with TestClient(app) as c:
        assert "ember app" in c.get("/").text
        assert c.get("/app.js").text == "console.log(1)"
        assert "ember app" in c.get("/actors/123").text  # the app's own routes survive reload
        assert c.get("/../../etc/passwd").status_code in (200, 404)
        assert "root:" not in c.get("/%2e%2e/%2e%2e/etc/passwd").text
        assert c.get("/api/nosuch").status_code == 404


def test_websocket_stream_delivers_state_changes(state):
    app = create_app(DashboardContext(state=state))
    with TestClient(app) as c, c.websocket_connect("/api/stream?topics=actor,event") as ws:
        hello = ws.receive_json()
        assert hello["type"] == "hello" and hello["topics"] == ["actor", "event"]
        state.update_actor({"actor_id": "ff" * 16, "state": "ALIVE", "class_name": "New"})
        msg = ws.receive_json()
        assert msg["type"] == "batch"
        assert {
            "type": "actor",
            "actor_id": "ff" * 16,
            "state": "ALIVE",
            "class_name": "New",
        } in msg["messages"]


def test_openapi_lists_every_endpoint(client):
    paths = set(client.get("/openapi.json").json()["paths"])
    for p in [
        "/api/version",
        "/api/cluster_status",
        "/api/nodes",
        "/api/nodes/{node_id}",
        "/api/workers",
        "/api/actors",
        "/api/actors/{actor_id}",
        "/api/actors/{actor_id}/kill",
        "/api/tasks",
        "/api/tasks/summary",
        "/api/objects",
        "/api/logs",
        "/api/logs/tail",
        "/api/logs/follow",
        "/api/logs/download",
        "/api/logs/search",
        "/api/stack",
        "/api/profile",
        "/api/events",
        "/api/history",
        "/api/stream/sse",
    ]:
        assert p in paths, p


# ---- agent4: bad input to the agent-backed endpoints is a 4xx whatever the agents' state ----


def test_unknown_log_file_is_404_naming_it_even_without_agents(client):
    for path in ("/api/logs/tail", "/api/logs/follow", "/api/logs/download"):
        r = client.get(path, params={"node_id": NODE, "name": "nope.log"})
        assert r.status_code == 404, (path, r.status_code)
        assert "nope.log" in r.json()["detail"] and "GET /api/logs" in r.json()["detail"]
    r = client.get("/api/logs/search", params={"node_id": NODE, "pattern": "x", "name": "nope.log"})
    assert r.status_code == 404
    r = client.get("/api/logs/tail", params={"node_id": "ffffffff", "name": "raylet.log"})
    assert r.status_code == 404 and "ffffffff" in r.json()["detail"]


def test_stream_timeouts_are_validated(client):
    for path in ("/api/logs/follow", "/api/stream/sse"):
        r = client.get(path, params={"node_id": NODE, "name": "raylet.log", "timeout": -1})
        assert r.status_code == 422 and "timeout" in r.json()["message"]


class _Hub:
    """Stands in for the agents' hub: connected, never asked (the checks come first)."""

    def connected_nodes(self) -> list[str]:
        return [NODE]

    async def call(self, *args, **kwargs):
        raise AssertionError(f"the agent must not be asked: {args}")


def test_only_ember_processes_are_sampled(state):
    app = create_app(DashboardContext(state=state, hub=_Hub()))
    with TestClient(app) as c:
        r = c.get("/api/profile", params={"pid": 1, "node_id": NODE, "duration": 1})
        assert r.status_code == 404 and "no Ember process with pid 1" in r.json()["detail"]
        r = c.get("/api/profile", params={"pid": 1, "duration": 1})
        assert r.status_code == 404 and "pid 1" in r.json()["detail"]
        r = c.get("/api/stack", params={"pid": 1})
        assert r.status_code == 404 and "pid 1" in r.json()["detail"]


# -- node ids: one resolver of prefixes for every endpoint that takes one (timeline4) --------

TWIN = "aa" * 4 + "cc" * 12  # shares its first 8 characters with NODE


def _two_nodes() -> DashboardState:
    from ember.dashboard.agent_hub import AgentHub, AgentLink

    st = DashboardState()
    fill(st, 20, 1)
    AgentHub(st).ingest(
        AgentLink(TWIN),
        {"type": "metrics", "time": 100.0, "info": {"node_ip": "10.0.0.2"}, "sample": {}},
    )
    return st


@pytest.mark.parametrize(
    "path",
    ["/api/nodes/{}", "/api/history?node_id={}", "/api/timeline?node_id={}", "/metrics?node_id={}"],
)
def test_node_id_prefixes_resolve_the_same_everywhere(path):
    with TestClient(create_app(DashboardContext(state=_two_nodes()))) as c:
        # The 16 characters `ember list` prints, the full id, either case.
        for given in (NODE[:16], NODE, NODE.upper(), TWIN[:16].upper()):
            assert c.get(path.format(given)).status_code == 200, given
        # A prefix of both nodes: 400 naming each candidate.
        r = c.get(path.format(NODE[:8]))
        assert r.status_code == 400, r.text
        detail = r.json()["detail"]
        assert NODE in detail and TWIN in detail and NODE[:8] in detail
        # No such node: 404 naming the id.
        r = c.get(path.format("cafe1234"))
        assert r.status_code == 404 and "cafe1234" in r.json()["detail"]
        # Too short to be a prefix: 404 saying so.
        r = c.get(path.format("aa"))
        assert r.status_code == 404 and "at least 4 characters" in r.json()["detail"]


def test_prefix_resolution_reaches_the_payloads():
    with TestClient(create_app(DashboardContext(state=_two_nodes()))) as c:
        assert c.get(f"/api/nodes/{TWIN[:16]}").json()["node_id"] == TWIN
        body = c.get("/metrics", params={"node_id": TWIN[:16]}).text
        assert f'node_id="{TWIN}"' in body and f'node_id="{NODE}"' not in body
        trace = c.get("/api/timeline", params={"node_id": NODE[:16]}).json()
        info = trace[-1]["args"]
        assert info["filters"]["node_id"] == NODE and info["tasks"] == 20
