"""``/docs`` (Swagger UI) and ``/redoc``, served from files installed with the service.

FastAPI's own docs pages load Swagger UI, ReDoc, a favicon and fonts from
CDNs, so without internet they are blank. These routes serve the same pages
with every asset from ``/docs/assets/``: the Swagger UI bundle and ReDoc's
standalone script that the ``fastapi-offline`` package ships (part of the
``server`` extra; only its files are used). Swagger UI's validator badge,
which would call validator.swagger.io, is switched off, and ReDoc gets no
Google Fonts. Both pages carry a Content-Security-Policy that lets them load
nothing from anywhere but this service: what the scripts would still fetch
from elsewhere (ReDoc's "API docs by Redocly" logo, from cdn.redoc.ly) is
never requested, and the page shows without it. ``create_app`` turns
FastAPI's CDN routes off and calls ``install``.
"""

from __future__ import annotations

import base64
import hashlib
import re
from importlib.resources import files
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

ASSETS = "/docs/assets"
SWAGGER_UI = {"validatorUrl": None}  # no badge fetched from validator.swagger.io
# This origin only. Inline scripts by their hash (Swagger UI's start-up); styles inline too
# (both UIs set them at run time); ReDoc's search runs in a worker made from a blob.
POLICY = (
    "default-src 'self'; script-src 'self' {scripts}; style-src 'self' 'unsafe-inline';"
    " img-src 'self' data:; font-src 'self' data:; worker-src 'self' blob:;"
    " connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'self'"
)
_INLINE_SCRIPT = re.compile(r"<script>(.*?)</script>", re.DOTALL)


def assets_folder() -> Path:
    """The folder of ``swagger-ui-bundle.js``, ``swagger-ui.css``, ``redoc.standalone.js``
    and ``favicon.png``, as installed by ``fastapi-offline``."""
    return Path(str(files("fastapi_offline").joinpath("static")))


def install(app: FastAPI) -> None:
    """Serve ``/docs``, ``/redoc`` and their assets from this machine (not in the schema)."""
    app.mount(ASSETS, StaticFiles(directory=assets_folder()), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        page = get_swagger_ui_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{app.title} - Swagger UI",
            swagger_js_url=f"{root}{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{root}{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{root}{ASSETS}/favicon.png",
            swagger_ui_parameters=SWAGGER_UI,
        )
        return _confined(page)

    @app.get("/redoc", include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        root = request.scope.get("root_path", "")
        page = get_redoc_html(
            openapi_url=f"{root}{app.openapi_url}",
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{root}{ASSETS}/redoc.standalone.js",
            redoc_favicon_url=f"{root}{ASSETS}/favicon.png",
            with_google_fonts=False,
        )
        return _confined(page)


def _confined(page: HTMLResponse) -> HTMLResponse:
    """``page`` with a policy that lets it run its own inline scripts and load nothing
    from anywhere but this origin."""
    body = bytes(page.body).decode()
    hashes = [
        "'sha256-" + base64.b64encode(hashlib.sha256(script.encode()).digest()).decode() + "'"
        for script in _INLINE_SCRIPT.findall(body)
    ]
    page.headers["Content-Security-Policy"] = POLICY.format(scripts=" ".join(hashes))
    return page
