"""The browser app's server side, without a browser: the page shown when the app is not built,
and the Actors page's query (filters applied before the limit, the ordered view reused while
the actor table is unchanged)."""

from __future__ import annotations

import warnings

from ember.dashboard.app import DashboardContext, create_app
from ember.dashboard.state import DashboardState

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient


def test_a_missing_build_names_the_command_that_makes_it(tmp_path):
    missing = tmp_path / "no-dist"
    app = create_app(DashboardContext(state=DashboardState(), frontend_dir=str(missing)))
    with TestClient(app) as c:
        r = c.get("/")
        assert r.status_code == 503
        assert "scripts/dev.sh setup" in r.text and "npm run build" in r.text
        assert str(missing) in r.text and 'href="/docs"' in r.text
        # Once built, the next request serves it: no dashboard restart.
        missing.mkdir()
        (missing / "index.html").write_text("<html>the app</html>")
        assert c.get("/").text == "<html>the app</html>"


def _actors(state: DashboardState) -> None:
    """Two jobs; in each, a Root creating a Leaf (through the Root's worker), 30 of each."""
    for i in range(30):
        job = "01000000" if i % 2 else "02000000"
        state.update_actor(
            {
                "actor_id": f"{i:032x}",
                "class_name": "Root",
                "state": "ALIVE",
                "job_id": job,
                "worker_id": f"w{i}",
                "node_id": "aa" * 16,
            }
        )
        state.update_actor(
            {
                "actor_id": f"{i + 1000:032x}",
                "class_name": "Leaf",
                "state": "ALIVE" if i % 3 else "PENDING",
                "job_id": job,
                "owner_worker_id": f"w{i}",
                "node_id": "aa" * 16 if i % 3 else None,
            }
        )


def test_class_and_job_filters_apply_before_the_limit():
    state = DashboardState()
    _actors(state)
    app = create_app(DashboardContext(state=state))
    with TestClient(app) as c:
        r = c.get("/api/frontend/actors", params={"class_name": "Leaf", "limit": 5}).json()
        assert r["total"] == 30 and len(r["items"]) == 5
        assert {a["class_name"] for a in r["items"]} == {"Leaf"}
        assert r["classes"] == {"Root": 30, "Leaf": 30}
        assert r["jobs"] == {"01000000": 30, "02000000": 30}
        both = {"class_name": "Leaf", "job_id": "0100", "state": "ALIVE", "limit": 100}
        r = c.get("/api/frontend/actors", params=both).json()
        # Odd i (job 01...) and i % 3 != 0: 10 of the 15.
        assert r["total"] == 10
        assert all(a["job_id"] == "01000000" and a["state"] == "ALIVE" for a in r["items"])
        # The tree keeps a match's creator above it.
        tree = c.get("/api/frontend/actors", params={**both, "view": "tree", "limit": 100}).json()
        assert tree["total"] == 20
        assert [a["class_name"] for a in tree["items"][:2]] == ["Root", "Leaf"]
        assert [a["depth"] for a in tree["items"][:2]] == [0, 1]
        assert [a["matches"] for a in tree["items"][:2]] == [False, True]
        node = c.get("/api/frontend/actors", params={"node_id": "aaaa", "limit": 1}).json()
        assert node["total"] == 50  # the 10 pending Leafs have no node


def test_the_tree_is_built_once_per_actor_table_version():
    state = DashboardState()
    _actors(state)
    ctx = DashboardContext(state=state)
    app = create_app(ctx)
    q = {"view": "tree", "limit": 10}
    with TestClient(app) as c:
        first = c.get("/api/frontend/actors", params={**q, "offset": 0}).json()
        views = ctx.extra["frontend_actor_views"]
        (key, built), *_ = views.items()
        # Scrolling: the next pages come from the same ordered view, not a new one.
        second = c.get("/api/frontend/actors", params={**q, "offset": 10}).json()
        assert list(views.items()) == [(key, built)]
        assert first["total"] == second["total"] == 60
        assert {a["actor_id"] for a in first["items"]}.isdisjoint(
            a["actor_id"] for a in second["items"]
        )
        # The GCS poll repeating the same rows changes nothing...
        version = state.actors_version
        state.update_actor({"actor_id": f"{0:032x}", "class_name": "Root", "state": "ALIVE"})
        assert state.actors_version == version
        c.get("/api/frontend/actors", params=q)
        assert len(views) == 1
        # ...a real change builds the view again, and it shows the change.
        state.update_actor({"actor_id": f"{0:032x}", "state": "DEAD"})
        assert state.actors_version == version + 1
        after = c.get("/api/frontend/actors", params={**q, "limit": 100}).json()
        assert len(views) == 2
        assert after["counts"]["DEAD"] == 1
        row = next(a for a in after["items"] if a["actor_id"] == f"{0:032x}")
        assert row["state"] == "DEAD"
