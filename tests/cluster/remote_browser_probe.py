"""Headless Chromium on "another host" (run in a network namespace by test_remote_browser.py):
opens the dashboard the ways an operator would and prints what it saw as JSON.

argv[1]: JSON {"url", "token", "pages": [[route, selector, text], ...], "frontend_dir"}.
Every wait has a deadline; a page that never shows its text is reported with what it did show.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.parse

WAIT_MS = 30_000


def main() -> None:
    spec = json.loads(sys.argv[1])
    sys.path.insert(0, spec["frontend_dir"])  # tests/frontend: the browser's path and flags
    from browser_utils import CHROMIUM, CHROMIUM_FLAGS
    from playwright.sync_api import sync_playwright

    url, token = spec["url"], spec["token"]
    report: dict = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS, headless=True)
        try:
            report["link"] = _with_link(browser, url, token, spec["pages"])
            report["form"] = _with_form(browser, url, token, spec["pages"][0])
            report["wrong"] = _wrong_token(browser, url)
            report["cross_site"] = _from_another_site(browser, url, token, spec["pages"][0])
        finally:
            browser.close()
    print(json.dumps(report))


def _watch(page) -> dict:
    """The network log's refusals (401s) and the live stream's connections."""
    seen: dict = {"unauthorized": [], "websockets": [], "ws_closed": []}
    page.on(
        "response",
        lambda r: seen["unauthorized"].append(r.url) if r.status == 401 else None,
    )

    def on_ws(ws) -> None:
        seen["websockets"].append(ws.url)
        ws.on("close", lambda w: seen["ws_closed"].append(w.url))

    page.on("websocket", on_ws)
    return seen


def _shows(page, selector: str, text: str) -> dict:
    """Waits until ``selector``'s text contains ``text``; what it showed either way. A page
    that loads itself again meanwhile (the sign-in retry) ends one wait early: wait again."""
    deadline = time.monotonic() + WAIT_MS / 1000
    ok = False
    while not ok and time.monotonic() < deadline:
        try:
            page.wait_for_function(
                "([s, t]) => (document.querySelector(s)?.innerText ?? '').includes(t)",
                arg=[selector, text],
                timeout=max(1.0, deadline - time.monotonic()) * 1000,
            )
            ok = True
        except Exception:
            page.wait_for_timeout(200)
    try:
        shown = page.evaluate("(s) => document.querySelector(s)?.innerText ?? null", selector)
    except Exception as e:  # navigating at that instant
        shown = f"(unreadable: {e})"
    return {"ok": ok, "shown": (shown or "")[:2000]}


def _stream_open(page) -> bool:
    try:
        page.wait_for_selector("[data-testid=stream-status][data-status=open]", timeout=WAIT_MS)
        return True
    except Exception:
        return False


def _with_link(browser, url: str, token: str, pages: list) -> dict:
    """``/?token=`` as the 401 message and ``ember start`` suggest; then every page."""
    ctx = browser.new_context()
    page = ctx.new_page()
    seen = _watch(page)
    first = page.goto(f"{url}/?token={urllib.parse.quote(token)}")
    out: dict = {
        "landed": page.url,
        "status": first.status if first else None,
        "redirected_from": first.request.redirected_from.url
        if first and first.request.redirected_from
        else None,
        "cookies": ctx.cookies(),
        "pages": {},
    }
    for route, selector, text in pages:
        page.goto(f"{url}/#/{route}")
        out["pages"][route] = {**_shows(page, selector, text), "stream": _stream_open(page)}
    # The stream's other transport: a WebSocket (the app's choice is per tab).
    page.evaluate("sessionStorage.setItem('ember.stream', 'ws')")
    page.reload()
    out["ws_stream"] = _stream_open(page)
    out.update({k: list(v) for k, v in seen.items()})  # before the sign-out below
    # The cookie stops working while the page is open (here: gone): the page's next call
    # gets a 401 and the page loads again as the sign-in form.
    ctx.clear_cookies()
    page.goto(f"{url}/#/{pages[1][0]}")
    try:
        page.wait_for_selector("input[name=token]", timeout=WAIT_MS)
        out["signed_out_shows_form"] = True
    except Exception:
        out["signed_out_shows_form"] = False
    ctx.close()
    return out


def _with_form(browser, url: str, token: str, check: list) -> dict:
    """No token: the login form, then the page the user asked for."""
    route, selector, text = check
    ctx = browser.new_context()
    page = ctx.new_page()
    first = page.goto(f"{url}/#/{route}")
    out = {"form_status": first.status if first else None}
    # Plain http to a host not localhost: the browser does not say where the navigation came
    # from, so the form reloads itself once (for a link from another site); let it.
    page.wait_for_function(
        "performance.getEntriesByType('navigation')[0]?.type === 'reload'"
        " && document.readyState === 'complete'",
        timeout=WAIT_MS,
    )
    out["form_title"] = page.title()
    page.fill("input[name=token]", token)
    page.click("button[type=submit]")
    page.wait_for_load_state()
    out["landed"] = page.url
    out["page"] = _shows(page, selector, text)
    out["stream"] = _stream_open(page)
    ctx.close()
    return out


def _wrong_token(browser, url: str) -> dict:
    ctx = browser.new_context()
    page = ctx.new_page()
    first = page.goto(f"{url}/?token=not-the-token")
    out = {
        "status": first.status if first else None,
        "redirected_from": first.request.redirected_from is not None if first else None,
        "landed": page.url,
        "alert": page.locator("[role=alert]").inner_text() if first else "",
        "cookies": ctx.cookies(),
    }
    # The form says so again for a wrong token typed in, and sets nothing.
    page.fill("input[name=token]", "still-not-it")
    page.click("button[type=submit]")
    page.wait_for_load_state()
    out["typed_alert"] = page.locator("[role=alert]").inner_text()
    out["typed_cookies"] = ctx.cookies()
    ctx.close()
    return out


def _from_another_site(browser, url: str, token: str, check: list) -> dict:
    """The link followed from another site's page (a chat, a wiki): the browser withholds
    SameSite=Strict cookies from that navigation's redirect, so the login page retries once
    from itself."""
    route, selector, text = check
    ctx = browser.new_context()
    page = ctx.new_page()
    chain: list = []
    page.on("response", lambda r: chain.append([r.url, r.status]))
    page.on("console", lambda m: chain.append(["console", m.text]))
    link = f"{url}/?token={urllib.parse.quote(token)}#/{route}"
    page.goto("data:text/html," + urllib.parse.quote(f'<a id="go" href="{link}">dashboard</a>'))
    page.click("#go")
    out = {"page": _shows(page, selector, text), "landed": page.url, "chain": chain[:8]}
    if not out["page"]["ok"]:
        out["content"] = page.content()[:600]
    ctx.close()
    return out


if __name__ == "__main__":
    main()
