"""``GET /``: the chat page, a few static files shipped in the package (``web_facade/static``).

The page is plain HTML, CSS and JavaScript, with no build step and nothing from a CDN; it
talks to the public ``/agentik`` API only (docs/chat.md). The files are read once, when the
app is made, and served from memory: only the names found then exist, so no request path
can reach another file. Each answer carries an ``ETag`` (a browser revalidates with
``If-None-Match`` and gets 304) and a Content-Security-Policy that lets the page load and
call nothing but this origin, and run no inline script.

``POST /`` stays A2A's JSON-RPC endpoint (``web_facade.a2a``): Flask routes by method.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from flask import Blueprint, Flask, Response, current_app, request
from flask.blueprints import BlueprintSetupState

from web_facade.errors import ApiError

__all__ = ["CONTENT_SECURITY_POLICY", "CONTENT_TYPES", "STATIC_DIR", "bp"]

bp = Blueprint("chat_page", __name__)

STATIC_DIR: Final = Path(__file__).resolve().parent / "static"

CONTENT_TYPES: Final = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}
"""The types the page is made of; a file of any other type is not served."""

CONTENT_SECURITY_POLICY: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
"""Only this origin's scripts, styles and API; no inline script or style, no framing."""

_FILES_KEY: Final = "agentik.chat_page.files"


@dataclass(frozen=True, slots=True)
class StaticFile:
    """One file of the page, held in memory with its type and entity tag."""

    body: bytes
    content_type: str
    etag: str


def load_files(directory: Path) -> dict[str, StaticFile]:
    """The servable files directly in ``directory``, by name."""
    files: dict[str, StaticFile] = {}
    for path in sorted(directory.iterdir()):
        content_type = CONTENT_TYPES.get(path.suffix)
        if content_type is None or not path.is_file():
            continue
        body = path.read_bytes()
        files[path.name] = StaticFile(body, content_type, hashlib.sha256(body).hexdigest()[:32])
    return files


@bp.record_once
def _load(state: BlueprintSetupState) -> None:
    app = state.app
    assert isinstance(app, Flask)
    app.extensions[_FILES_KEY] = load_files(STATIC_DIR)


def _serve(name: str) -> Response:
    files: dict[str, StaticFile] = current_app.extensions[_FILES_KEY]
    found = files.get(name)
    if found is None:
        raise ApiError(404, "not_found", "no such file")
    response = current_app.response_class(found.body, content_type=found.content_type)
    response.set_etag(found.etag)
    # Revalidate every time: a new version of the package shows at once, and a 304 is cheap.
    response.headers["Cache-Control"] = "no-cache"
    response.headers["Content-Security-Policy"] = CONTENT_SECURITY_POLICY
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["Referrer-Policy"] = "no-referrer"
    response.make_conditional(request)
    return response


@bp.get("/")
def index() -> Response:
    """The chat page."""
    return _serve("index.html")


@bp.get("/static/<name>")
def static_file(name: str) -> Response:
    """A script, style sheet or image of the page."""
    return _serve(name)
