"""``/docs`` (Swagger UI) and ``/redoc`` with their scripts and styles served by the dashboard.

FastAPI's own pages load Swagger UI and ReDoc from a CDN, so on a cluster without internet
``/docs`` is a blank page. The files come from the ``fastapi-offline`` package, which ships
the swagger-ui-dist and ReDoc bundles and follows their releases; only its files are used.
Every URL is built from the request's ``root_path``, so the pages work behind a URL prefix.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path
from urllib.parse import quote

from fastapi import APIRouter, HTTPException, Request
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.responses import FileResponse, HTMLResponse

router = APIRouter(include_in_schema=False)
STATIC_DIR = Path(str(files("fastapi_offline") / "static"))
STATIC_PREFIX = "/docs/static/"
# Only these names are served: the route never maps a user's path onto the disk.
ASSETS = {
    "swagger-ui-bundle.js": "text/javascript",
    "swagger-ui.css": "text/css",
    "redoc.standalone.js": "text/javascript",
    "favicon.png": "image/png",
}
TITLE = "Ember dashboard"


def _spec_url(request: Request) -> str:
    root = request.scope.get("root_path", "").rstrip("/")
    url = f"{root}{request.app.openapi_url}"
    # A user who opened /docs?token=... must be able to load the spec the same way; the
    # token is theirs and already in their URL.
    token = request.query_params.get("token")
    return f"{url}?token={quote(token)}" if token else url


def _static(request: Request, name: str) -> str:
    return f"{request.scope.get('root_path', '').rstrip('/')}{STATIC_PREFIX}{name}"


@router.get("/docs")
async def swagger_ui(request: Request) -> HTMLResponse:
    root = request.scope.get("root_path", "").rstrip("/")
    return get_swagger_ui_html(
        openapi_url=_spec_url(request),
        title=f"{TITLE} - Swagger UI",
        swagger_js_url=_static(request, "swagger-ui-bundle.js"),
        swagger_css_url=_static(request, "swagger-ui.css"),
        swagger_favicon_url=_static(request, "favicon.png"),
        oauth2_redirect_url=f"{root}/docs/oauth2-redirect",
    )


@router.get("/docs/oauth2-redirect")
async def swagger_ui_redirect() -> HTMLResponse:
    return get_swagger_ui_oauth2_redirect_html()


@router.get("/redoc")
async def redoc(request: Request) -> HTMLResponse:
    return get_redoc_html(
        openapi_url=_spec_url(request),
        title=f"{TITLE} - ReDoc",
        redoc_js_url=_static(request, "redoc.standalone.js"),
        redoc_favicon_url=_static(request, "favicon.png"),
        with_google_fonts=False,  # fonts from Google would fail offline too; ReDoc falls back
    )


@router.get(STATIC_PREFIX + "{name}")
async def docs_asset(name: str) -> FileResponse:
    if name not in ASSETS:
        raise HTTPException(404, f"no documentation asset {name!r}")
    return FileResponse(
        STATIC_DIR / name,
        media_type=ASSETS[name],
        # The files change only with the installed package: let browsers keep them a day.
        headers={"Cache-Control": "public, max-age=86400"},
    )
