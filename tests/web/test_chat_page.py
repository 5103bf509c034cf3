"""The chat page's files at ``GET /`` and ``/static/<name>``: types, caching, CSP, no escape."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient

from web_facade.chat_page import CONTENT_SECURITY_POLICY, STATIC_DIR, load_files


@pytest.mark.parametrize(
    ("path", "content_type"),
    [
        ("/", "text/html; charset=utf-8"),
        ("/static/app.js", "text/javascript; charset=utf-8"),
        ("/static/app.css", "text/css; charset=utf-8"),
        ("/static/marked.esm.js", "text/javascript; charset=utf-8"),
        ("/static/purify.es.js", "text/javascript; charset=utf-8"),
    ],
)
def test_each_file_is_served_with_its_type_a_strict_policy_and_an_etag(
    client: FlaskClient, path: str, content_type: str
) -> None:
    response = client.get(path)
    assert response.status_code == 200
    assert response.headers["Content-Type"] == content_type
    assert response.headers["Content-Security-Policy"] == CONTENT_SECURITY_POLICY
    assert response.headers["X-Content-Type-Options"] == "nosniff"
    assert response.headers["Cache-Control"] == "no-cache"
    assert response.headers["ETag"].startswith('"')
    assert response.get_data()


def test_the_policy_allows_this_origin_only_and_no_inline_script() -> None:
    directives = dict(d.strip().split(" ", 1) for d in CONTENT_SECURITY_POLICY.split(";"))
    assert directives["default-src"] == "'none'"
    assert directives["script-src"] == "'self'"
    assert directives["connect-src"] == "'self'"
    assert directives["frame-ancestors"] == "'none'"
    assert "unsafe" not in CONTENT_SECURITY_POLICY


def test_the_page_has_no_inline_script_style_or_handler() -> None:
    html = (STATIC_DIR / "index.html").read_text()
    assert re.findall(r"<script\b[^>]*>", html) == ['<script type="module" src="static/app.js">']
    assert "<style" not in html
    assert not re.search(r"\s(on\w+|style)\s*=", html)
    assert "//" not in html  # nothing from elsewhere


def test_a_known_etag_is_answered_304(client: FlaskClient) -> None:
    etag = client.get("/static/app.js").headers["ETag"]
    again = client.get("/static/app.js", headers={"If-None-Match": etag})
    assert again.status_code == 304
    assert again.get_data() == b""
    changed = client.get("/static/app.js", headers={"If-None-Match": '"other"'})
    assert changed.status_code == 200


def test_head_answers_the_headers_without_the_body(client: FlaskClient) -> None:
    response = client.head("/")
    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("text/html")
    assert response.get_data() == b""


@pytest.mark.parametrize(
    "path",
    [
        "/static/nope.js",
        "/static/",
        "/static/index.htm",
        "/static/../chat_page.py",
        "/static/..%2fchat_page.py",
        "/static/%2e%2e%2f__init__.py",
        "/static/..%5c__init__.py",
        "/static/%2e%2e/%2e%2e/pyproject.toml",
        "/static//etc/passwd",
        "/static/app.js/",
        "/static/app.js%00.css",
        "/chat_page.py",
        "/openapi.json",
    ],
)
def test_unknown_assets_and_escapes_are_404(client: FlaskClient, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 404, path
    assert response.get_json()["error"]["code"] == "not_found"


def test_only_the_page_types_are_loaded(tmp_path: Path) -> None:
    (tmp_path / "a.js").write_text("1")
    (tmp_path / "b.py").write_text("secret = 1")
    (tmp_path / "c.css").mkdir()
    files = load_files(tmp_path)
    assert list(files) == ["a.js"]
    assert files["a.js"].content_type == "text/javascript; charset=utf-8"


def test_post_to_the_root_is_still_a2a_json_rpc(client: FlaskClient) -> None:
    response = client.post("/", json={"jsonrpc": "2.0", "id": 1, "method": "no/such/method"})
    assert response.status_code == 200
    body = response.get_json()
    assert body["jsonrpc"] == "2.0"
    assert body["error"]["code"] == -32601


def test_other_methods_on_the_root_are_405_naming_get_and_post(client: FlaskClient) -> None:
    response = client.put("/")
    assert response.status_code == 405
    assert {"GET", "POST"} <= {m.strip() for m in response.headers["Allow"].split(",")}


def test_without_tokens_the_page_is_served_to_loopback_names_only(
    make_app: Callable[..., Flask],
) -> None:
    client = make_app().test_client()
    assert client.get("/", base_url="http://localhost:8000").status_code == 200
    rebound = client.get("/", base_url="http://rebind.evil.example:8000")
    assert rebound.status_code == 403
    assert rebound.get_json()["error"]["code"] == "forbidden_host"


def test_with_tokens_the_page_needs_none(make_app: Callable[..., Flask]) -> None:
    client = make_app(AGENTIK_TOKENS="alice:secret-token-a").test_client()
    assert client.get("/", base_url="http://agent.example.com").status_code == 200
    assert client.get("/static/app.js", base_url="http://agent.example.com").status_code == 200


def test_the_vendored_libraries_are_pinned_with_their_licences_and_checksums() -> None:
    table = (STATIC_DIR / "VENDORED.md").read_text()
    rows = re.findall(
        r"^\| `([\w.-]+\.js)` \| .*? (\d+\.\d+\.\d+) \|.*`([0-9a-f]{64})` \|$", table, re.M
    )
    assert {name for name, _, _ in rows} == {"marked.esm.js", "purify.es.js"}
    for name, version, digest in rows:
        body = (STATIC_DIR / name).read_bytes()
        assert hashlib.sha256(body).hexdigest() == digest, f"{name} differs from VENDORED.md"
        assert version.encode() in body[:400], f"{name} is not version {version}"
    for licence in ("LICENSE.marked.txt", "LICENSE.dompurify.txt", "LICENSE-MPL.dompurify.txt"):
        assert (STATIC_DIR / licence).read_text().strip()


def test_the_page_loads_no_script_from_elsewhere() -> None:
    for path in STATIC_DIR.glob("*.js"):
        imports = re.findall(r"""^import\b[^;]*?from\s*["']([^"']+)["']""", path.read_text(), re.M)
        assert all(spec.startswith("./") for spec in imports), (path.name, imports)


def test_licences_and_notes_are_shipped_but_not_served(client: FlaskClient) -> None:
    assert client.get("/static/LICENSE.marked.txt").status_code == 404
    assert client.get("/static/VENDORED.md").status_code == 404
