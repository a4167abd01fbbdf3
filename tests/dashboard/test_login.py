"""A browser's way in to a dashboard that wants the token (issue 28, item 1): a ``?token=`` link
sets an HttpOnly, SameSite=Strict cookie and answers 303 to the URL without the token; a page
asked for without one gets a login form that sets the same cookie; a wrong token gets the form
saying so; API clients keep their 401 JSON. Here through the real ASGI app (Starlette's test
client); tests/cluster/test_remote_browser.py drives Chromium from another network namespace."""

from __future__ import annotations

import pytest
from dashboard_state_fill import NODE, TestClient, fill
from ember.dashboard.app import DashboardContext, create_app
from ember.dashboard.state import DashboardState

TOKEN = "0123abcd" * 4
PAGE = {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}


def _client(prefix: str = "") -> TestClient:
    st = DashboardState()
    fill(st, 5, 1)
    app = create_app(DashboardContext(state=st, host="0.0.0.0", prefix=prefix), token=TOKEN)
    return TestClient(app, base_url="http://10.1.2.3:8265", follow_redirects=False)


def test_a_token_link_becomes_a_cookie_and_a_clean_url():
    with _client() as c:
        r = c.get(f"/tasks?token={TOKEN}&state=FAILED", headers=PAGE)
        assert r.status_code == 303
        assert r.headers["location"] == "./tasks?state=FAILED"  # relative, token gone
        cookie = r.headers["set-cookie"]
        assert cookie.startswith(f"ember_token_8265={TOKEN}; Path=/;")
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Secure" not in cookie
        # The cookie alone then opens the API, as the page's scripts use it.
        c.cookies.set("ember_token_8265", TOKEN)
        nodes = c.get("/api/nodes").json()
        assert [n["node_id"] for n in nodes["items"]] == [NODE]
        r = c.get("/", params={"token": TOKEN}, headers=PAGE)
        assert r.headers["location"] == "./"


def test_behind_a_prefix_the_cookie_path_is_the_prefix():
    with _client("/ember") as c:
        r = c.get(f"/ember/?token={TOKEN}", headers={**PAGE, "X-Forwarded-Proto": "https"})
        assert r.status_code == 303 and r.headers["location"] == "./"
        cookie = r.headers["set-cookie"]
        assert "Path=/ember/;" in cookie and "Secure" in cookie


def test_a_wrong_token_gets_the_form_saying_so_not_a_redirect():
    with _client() as c:
        r = c.get("/jobs?token=nope", headers=PAGE)
        assert r.status_code == 401 and "set-cookie" not in r.headers
        assert "The token in the link is not this dashboard&#x27;s token." in r.text
        assert '<form method="post" action="login"' in r.text


def test_the_login_form_sets_the_cookie_and_goes_back():
    with _client() as c:
        r = c.get("/nodes/abc?view=x", headers=PAGE)
        assert r.status_code == 401 and "Cluster token" in r.text
        # Relative to /nodes/abc, the login route is ../login; it returns to the page.
        assert 'action="../login"' in r.text and 'value="/nodes/abc?view=x"' in r.text
        r = c.post("/login", data={"token": "wrong", "next": "/nodes/abc"})
        assert r.status_code == 401 and "That is not this dashboard&#x27;s token." in r.text
        r = c.post("/login", data={"token": TOKEN, "next": "/nodes/abc?view=x"})
        assert r.status_code == 303 and r.headers["location"] == "./nodes/abc?view=x"
        assert r.headers["set-cookie"].startswith(f"ember_token_8265={TOKEN};")
        # Never another site: anything but a path of this app goes to its root.
        for bad in ("https://evil.example/", "//evil.example/", "/\\evil.example"):
            r = c.post("/login", data={"token": TOKEN, "next": bad})
            assert r.headers["location"] == "./", bad


def test_a_login_post_larger_than_a_few_kb_is_refused():
    with _client() as c:
        r = c.post("/login", data={"token": TOKEN, "next": "/" + "x" * 10_000})
        assert r.status_code == 401 and "too large or too slow" in r.text
        assert "set-cookie" not in r.headers


@pytest.mark.parametrize("header", ["Authorization", "X-Ray-Authorization"])
def test_api_clients_keep_their_401_and_headers(header):
    with _client() as c:
        r = c.get("/api/nodes")
        assert r.status_code == 401 and r.headers["content-type"] == "application/json"
        said = r.json()["detail"]
        for how in ("Authorization: Bearer <token>", "?token=<token>", "EMBER_TOKEN"):
            assert how in said, how
        assert "RAY_AUTH_MODE=token RAY_AUTH_TOKEN=<token>" in said
        r = c.get("/api/nodes", headers={header: f"Bearer {TOKEN}"})
        assert r.json()["items"][0]["node_id"] == NODE
        # ?token= on an API call (a script, a WebSocket) still works, with no redirect.
        assert c.get(f"/api/nodes?token={TOKEN}").status_code == 200


def test_a_link_followed_from_another_site_reloads_once_from_the_page():
    """A SameSite=Strict cookie is withheld from a navigation another site started, redirect
    included: the form then reloads once from itself, which sends it. Browsers say where a
    navigation came from only to https and localhost; elsewhere the form reloads once."""
    with _client() as c:
        for site in ("cross-site", None):
            headers = {**PAGE, **({"Sec-Fetch-Site": site} if site else {})}
            r = c.get("/", headers=headers)
            assert "location.reload()" in r.text and "ember.signInRetry" in r.text, site
        r = c.get("/", headers={**PAGE, "Sec-Fetch-Site": "same-origin"})
        assert "location.reload" not in r.text
        # A wrong token: the form says so and stays.
        r = c.get("/?token=nope", headers={**PAGE, "Sec-Fetch-Site": "cross-site"})
        assert "location.reload" not in r.text
