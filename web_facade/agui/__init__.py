"""The AG-UI 1.0 facade (``POST /agui``): routes, input parsing, the event table, the stream.

Imported only by ``web_facade.create_app``; gunicorn's master never loads it.
"""
