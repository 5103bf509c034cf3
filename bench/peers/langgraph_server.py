"""LangGraph's Agent Server with the in-memory runtime, started as ``langgraph dev`` does.

Run (in ``.bench-venvs/langgraph``): ``python bench/peers/langgraph_server.py PORT JOBS``:
``langgraph_api.cli.run_server`` with the graph of ``langgraph_graph.py`` as assistant
``agent``, ``JOBS`` runs at once per worker, no reload, no browser, no file persistence, no
``blockbuster`` check for blocking calls (the production server has none).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from langgraph_api.cli import run_server

if __name__ == "__main__":
    port, jobs = int(sys.argv[1]), int(sys.argv[2])
    os.environ.setdefault("LANGGRAPH_NO_VERSION_CHECK", "true")
    os.environ.setdefault("LANGSMITH_TRACING", "false")
    graph = Path(__file__).with_name("langgraph_graph.py")
    run_server(
        host="127.0.0.1",
        port=port,
        graphs={"agent": f"{graph}:graph"},
        n_jobs_per_worker=jobs,
        disable_persistence=True,
        # No blockbuster (the dev server's check for blocking calls): production runs without it.
        allow_blocking=True,
        server_level="WARNING",
    )
