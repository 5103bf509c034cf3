"""``python -m engine_service`` starts the engine (same as ``agentik engine``)."""

import sys

from agentik.cli import main

raise SystemExit(main([*sys.argv[1:], "engine"] if "engine" not in sys.argv else sys.argv[1:]))
