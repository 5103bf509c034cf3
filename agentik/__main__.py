"""``python -m agentik`` is the ``agentik`` command."""

from agentik.cli import main

raise SystemExit(main())
