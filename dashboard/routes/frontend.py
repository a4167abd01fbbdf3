"""The built browser app at ``/``: the files of ``frontend/dist`` in the source tree (the
frontend issue's build output), the copy an installed wheel or sdist carries at
``ember/frontend/dist`` (setup.py puts it there), or ``EMBER_DASHBOARD_FRONTEND_DIR``. Unknown paths outside
``/api`` get ``index.html`` so the app's own routes survive a reload."""

from __future__ import annotations

import html
import os

from ember.dashboard.app import DashboardContext, get_ctx
from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.responses import FileResponse, HTMLResponse

router = APIRouter(include_in_schema=False)


def _expected_dir() -> str:
    """Where the built app is looked for: the env override, or ``frontend/dist`` beside
    ``dashboard/``: in the source tree (editable installs, CI) that is the build output
    itself; installed from a wheel, ``site-packages/ember/frontend/dist``, the packaged copy."""
    env = os.environ.get("EMBER_DASHBOARD_FRONTEND_DIR")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.normpath(os.path.join(here, "..", "..", "frontend", "dist"))


def default_frontend_dir() -> str | None:
    path = _expected_dir()
    return path if os.environ.get("EMBER_DASHBOARD_FRONTEND_DIR") or os.path.isdir(path) else None


@router.get("/{path:path}")
async def static(path: str, request: Request, ctx: DashboardContext = Depends(get_ctx)):
    if path.startswith("api/") or path == "api":
        raise HTTPException(
            404, f"no API endpoint /{path}; see {request.scope.get('root_path', '')}/docs"
        )
    # Looked for again on each request without one: a build made after the dashboard
    # started is served at the next reload.
    root = ctx.frontend_dir or default_frontend_dir()
    if not root or not os.path.isdir(root):
        prefix = request.scope.get("root_path", "")
        return HTMLResponse(
            "<!doctype html><title>Ember dashboard</title><h1>Ember dashboard</h1>"
            f"<p>The browser app is not built (no {html.escape(root or _expected_dir())}). Build it "
            "from the source tree with <code>scripts/dev.sh setup</code> (or "
            "<code>cd frontend &amp;&amp; npm install &amp;&amp; npm run build</code>), then "
            "reload this page; or point <code>EMBER_DASHBOARD_FRONTEND_DIR</code> at a built "
            f'copy. The REST API is at <a href="{prefix}/docs">{prefix}/docs</a>.</p>',
            status_code=503,
        )
    full = os.path.realpath(os.path.join(root, path))
    if not full.startswith(os.path.realpath(root) + os.sep) and full != os.path.realpath(root):
        raise HTTPException(404, "not found")
    if path and os.path.isfile(full):
        return FileResponse(full)
    index = os.path.join(root, "index.html")
    if os.path.isfile(index):
        return FileResponse(index)
    raise HTTPException(404, f"{root} has no index.html")


@router.api_route("/{path:path}", methods=["POST", "PUT", "PATCH", "DELETE", "OPTIONS"])
async def unknown(path: str, request: Request) -> None:
    """Any other method on a path no route has is a 404, as a GET would be (not a 405: the
    catch-all above answers GET only, and a 405 would suggest the path exists)."""
    raise HTTPException(404, f"no endpoint {request.method} /{path}")
