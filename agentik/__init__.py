"""What both processes share: settings, logs, traces, the process helpers, the generated
gRPC stubs (``agentik.rpc``) and the ``agentik`` command (``agentik.cli``).

Nothing here imports ``engine_service`` or ``web_facade``, except the command line, which
is the entry layer that starts either (docs/architecture.md; ruff's TID251 keeps it so).
"""

__version__ = "0.1.0"
"""The package's version, without reading the installed metadata (``importlib.metadata``
and ``email``, 2.5 MiB of every process); ``tests/test_version.py`` holds it to them."""
