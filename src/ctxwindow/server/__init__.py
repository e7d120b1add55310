"""The OpenAI-compatible HTTP service (the ``server`` extra).

``create_app(settings)`` builds the app; ``serve(settings)`` runs it with uvicorn.
"""

from ctxwindow.server.app import create_app
from ctxwindow.server.main import serve
from ctxwindow.server.settings import Settings, load_settings

__all__ = ["Settings", "create_app", "load_settings", "serve"]
