"""What both processes share: settings, logs, traces, the process helpers, the generated
gRPC stubs (``agentik.rpc``) and the ``agentik`` command (``agentik.cli``).

Nothing here imports ``engine_service`` or ``web_facade``, except the command line, which
is the entry layer that starts either (docs/architecture.md; ruff's TID251 keeps it so).
"""
