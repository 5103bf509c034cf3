"""agentik's web facade: a Flask app that translates HTTP into gRPC calls on the engine.

``create_app()`` builds it; gunicorn serves it with ``gthread`` workers (see
``web_facade.gunicorn_conf``). The app keeps no conversation state of its own.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from agentik import tracing
from agentik.config import Settings, load_settings

if TYPE_CHECKING:
    from flask import Flask

    from web_facade.engine_client import EngineClient

__all__ = ["create_app"]


def create_app(settings: Settings | None = None, engine: EngineClient | None = None) -> Flask:
    """The facade's WSGI app; settings default to the environment (and AGENTIK_CONFIG)."""
    # Imported here, not at the top: gunicorn's master imports this package for its config
    # module and should not carry Flask, gRPC and the protocol SDKs it never uses.
    from flask import Flask

    from web_facade import chat_page, health
    from web_facade.a2a import rest as a2a_rest
    from web_facade.a2a import routes as a2a
    from web_facade.agentik import routes as agentik
    from web_facade.agui import routes as agui
    from web_facade.cors import install_cors
    from web_facade.engine_client import EngineClient, install
    from web_facade.errors import install_error_handlers
    from web_facade.hosts import install_host_guard
    from web_facade.mcp import routes as mcp_routes
    from web_facade.observe import install_observability
    from web_facade.request_body import DISCARD_KEY

    if settings is None:
        settings = load_settings(None, os.environ, mcp=False)  # MCP is the engine's alone
    app = Flask(__name__, static_folder=None)  # chat_page serves web_facade/static
    app.config["MAX_CONTENT_LENGTH"] = settings.web.max_body_bytes
    app.config[DISCARD_KEY] = settings.discard_body_bytes
    app.json.sort_keys = False  # type: ignore[attr-defined]
    app.json.compact = True  # type: ignore[attr-defined]
    # Engine workers on one port: a few connections each, so the kernel spreads them until
    # the workers' own addresses are known; then each call goes to the next worker.
    channels = 1 if settings.engine.workers == 1 else 2 * settings.engine.workers
    target = settings.web.engine_target
    limit = settings.request_message_bytes
    keepalive = settings.web.engine_keepalive
    client = engine or EngineClient(target, channels, limit, discover=True, keepalive=keepalive)
    install(app, settings, client)
    install_observability(app)
    install_error_handlers(app)
    install_host_guard(app, settings)
    install_cors(app, settings.web.cors_origins)
    app.register_blueprint(agentik.bp)
    app.register_blueprint(health.bp)
    app.register_blueprint(agui.bp)
    app.register_blueprint(a2a.bp)
    app.register_blueprint(a2a_rest.bp)  # A2A's HTTP+JSON binding
    app.register_blueprint(chat_page.bp)
    app.register_blueprint(mcp_routes.bp)  # agentik as an MCP server, docs/mcp.md
    if tracing.enabled():  # set up per worker by gunicorn_conf.post_fork
        from web_facade.tracing import install_tracing

        install_tracing(app)
    return app
