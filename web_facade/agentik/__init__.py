"""The ``/agentik`` REST + SSE API: routes, the JSON shapes, the event table, the stream.

Imported only by ``web_facade.create_app``; gunicorn's master never loads it.
"""
