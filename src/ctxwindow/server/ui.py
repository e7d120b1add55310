"""The session inspector: ``/ui/``, a page that shows what the model saw and why.

The page is three static files (``inspector/``: HTML, one JS module, one CSS
file) that hold no data: every session, message and report comes from the API
with the user's key, so serving them needs no key and tenancy stays the API's.
Each file is read once, served with its content type, an ``ETag`` and
``Cache-Control: no-cache`` (a browser revalidates and gets a 304), and a
Content-Security-Policy that lets the page load nothing from anywhere else.

>>> sorted(ASSETS)
['index.html', 'inspector.css', 'inspector.js']
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib.resources import files

from fastapi import APIRouter, HTTPException, Request, Response
from fastapi.responses import RedirectResponse

ASSETS = {
    "index.html": "text/html; charset=utf-8",
    "inspector.css": "text/css; charset=utf-8",
    "inspector.js": "text/javascript; charset=utf-8",
}
# Only this origin, for scripts, styles, images and API calls; no inline script, no frames.
POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:;"
    " connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none';"
    " frame-ancestors 'none'"
)
HEADERS = {
    "Cache-Control": "no-cache",
    "Content-Security-Policy": POLICY,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


@dataclass(frozen=True)
class Asset:
    """One file of the page, read once, with its content type and entity tag."""

    body: bytes
    media_type: str
    etag: str

    @classmethod
    def of(cls, body: bytes, media_type: str) -> Asset:
        return cls(body, media_type, '"' + hashlib.sha256(body).hexdigest()[:32] + '"')

    def response(self, request: Request) -> Response:
        """The file, or a 304 when the browser's copy (``If-None-Match``) is this one."""
        headers = {**HEADERS, "ETag": self.etag}
        if self.etag in request.headers.get("if-none-match", ""):
            return Response(status_code=304, headers=headers)
        return Response(self.body, media_type=self.media_type, headers=headers)


def load_assets() -> dict[str, Asset]:
    """The page's files, from the ``inspector`` folder of this package."""
    folder = files("ctxwindow.server").joinpath("inspector")
    return {
        name: Asset.of(folder.joinpath(name).read_bytes(), kind) for name, kind in ASSETS.items()
    }


def router() -> APIRouter:
    """``/ui`` (a redirect), ``/ui/`` (the page) and ``/ui/<file>``; not in the OpenAPI
    document (they are not API). ``create_app`` leaves it out when ``settings.ui`` is false,
    so every ``/ui`` path is then a 404."""
    assets = load_assets()
    ui = APIRouter(prefix="/ui", include_in_schema=False)

    @ui.get("")
    async def redirect() -> Response:
        # relative, so that the page also works behind a proxy that mounts it under a prefix
        return RedirectResponse("ui/", status_code=308)

    @ui.get("/")
    async def page(request: Request) -> Response:
        return assets["index.html"].response(request)

    @ui.get("/{name}")
    async def asset(name: str, request: Request) -> Response:
        found = assets.get(name)
        if found is None or name == "index.html":
            raise HTTPException(404)
        return found.response(request)

    return ui
