"""Loads a trace into speedscope (from npm, installed in tests/tools by ``scripts/dev.sh
setup``) running in Debian's chromium, and returns what its importer made of it: the
profile it exports (speedscope's own file format) and the browser console's lines.

speedscope's importer only exists in its browser bundle, so the test drives the real app:
the release files and the trace are served from a loopback HTTP server, the page opens the
trace with ``#profileURL=``, and the Export button hands back the imported profiles."""

from __future__ import annotations

import functools
import http.server
import json
import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

TOOLS = Path(__file__).resolve().parents[1] / "tools"
RELEASE = TOOLS / "node_modules" / "speedscope" / "dist" / "release"
CHROMIUM = shutil.which("chromium")


def require_viewer() -> None:
    if not (RELEASE / "index.html").exists():
        pytest.skip("speedscope is not installed: run scripts/dev.sh setup (npm ci in tests/tools)")
    if CHROMIUM is None:
        pytest.skip("Debian's chromium is missing: run scripts/dev.sh setup")
    pytest.importorskip("playwright.sync_api")


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


def import_in_speedscope(trace: Path, workdir: Path, timeout_s: float = 60) -> dict[str, Any]:
    """{"export": speedscope file, "console": [lines], "dialogs": [alerts]}."""
    from playwright.sync_api import sync_playwright

    require_viewer()
    root = workdir / "speedscope-www"
    shutil.copytree(RELEASE, root, dirs_exist_ok=True)
    shutil.copy(trace, root / "trace.json")
    handler = functools.partial(_Quiet, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    port = server.server_address[1]
    console: list[str] = []
    dialogs: list[str] = []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path=CHROMIUM,
                # speedscope draws with WebGL: SwiftShader gives headless chromium one.
                args=["--use-gl=swiftshader", "--enable-unsafe-swiftshader", "--no-sandbox"],
            )
            try:
                page = browser.new_page()
                page.on("console", lambda m: console.append(m.text))
                page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
                base = f"http://127.0.0.1:{port}"
                page.goto(f"{base}/index.html#profileURL={base}/trace.json")
                page.get_by_text("Export").wait_for(timeout=timeout_s * 1000)
                with page.expect_download(timeout=timeout_s * 1000) as download:
                    page.get_by_text("Export").click()
                exported = json.loads(Path(download.value.path()).read_text())
            finally:
                browser.close()
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
    return {"export": exported, "console": console, "dialogs": dialogs}


def stacks_of(profile: dict[str, Any], frames: list[dict[str, Any]]) -> list[list[str]]:
    """Every open (O) event's stack of frame names; asserts O/C events nest properly."""
    stack: list[int] = []
    out = []
    for ev in profile["events"]:
        if ev["type"] == "O":
            stack.append(ev["frame"])
            out.append([frames[f]["name"] for f in stack])
        else:
            assert stack and stack[-1] == ev["frame"], f"bad nesting at {ev} in {profile['name']}"
            stack.pop()
    assert not stack, f"frames left open in {profile['name']}"
    return out


__all__ = ["import_in_speedscope", "require_viewer", "stacks_of"]
