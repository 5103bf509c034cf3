"""The peers of ``python -m bench.peer_bench``: one small app per peer, each run in its own venv.

The app files import only their peer's packages (and the standard library): they run under
``.bench-venvs/<peer>/bin/python``, never under the project's interpreter.
"""
