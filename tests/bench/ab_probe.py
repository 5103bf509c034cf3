"""A stand-in benchmark for the tests of ``bench.ab``: figures from the environment.

Prints ``{"first_token_p99_ms": $AB_P99, "cpu_s": {"engine": $AB_CPU}, "ok": true}`` (or
writes it to ``--out``), appends ``$AB_NAME`` (or its last ``--name``) to ``$AB_LOG`` so
the order of the runs can be read back, and exits with ``$AB_EXIT`` when that is set
(``$AB_NO_OUT``: writes no ``--out`` file, as a bench that broke would).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    env = os.environ
    name = env.get("AB_NAME", "?")
    if "--name" in args:  # the last one given wins, as with argparse
        name = args[len(args) - 1 - args[::-1].index("--name") + 1]
    if log := env.get("AB_LOG"):
        with Path(log).open("a") as file:
            file.write(name + "\n")
    if code := env.get("AB_EXIT"):
        print("the probe was told to fail", file=sys.stderr)
        raise SystemExit(int(code))
    figures = {
        "first_token_p99_ms": float(env.get("AB_P99", "0")),
        "cpu_s": {"engine": float(env.get("AB_CPU", "0"))},
        "ok": True,
    }
    if "--out" in args:
        if not env.get("AB_NO_OUT"):
            Path(args[args.index("--out") + 1]).write_text(json.dumps(figures))
        print("| a table, not JSON |")
    else:
        print("warming up\n" + json.dumps(figures))


if __name__ == "__main__":
    main()
