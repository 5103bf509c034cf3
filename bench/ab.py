"""Two variants of one benchmark, alternated in pairs: what each figure did, pair by pair.

On a shared 2-core box a bench's tail figures move by up to 2x between two runs of the same
code, so a change is judged by many alternated pairs, never by one run of each. This runs
``--pairs`` pairs of the bench given after ``--``, once per variant in each pair, the order
swapped every other pair (A B, B A, ...) so that a drift of the box does not favour one
side. A variant is a checkout (``--a-tree``/``--b-tree``, default: this one; each run starts
in it, with ``PYTHONPATH`` unset, so ``python -m`` imports that checkout's code and the bench
starts its servers from it), environment assignments (``--a-env``/``--b-env``, e.g. a
setting such as ``AGENTIK_GC_THRESHOLD=0``) and arguments put after the bench's own
(``--a-arg``/``--b-arg``, e.g. ``--b-arg=--web-workers=1``).

The bench's figures are read from JSON: from the file named ``{out}`` in its arguments (the
tool puts a path of its own there), else from the last line of its output that is a JSON
object. Every number in it is a figure, named by its path (``levels.256.0.agui.cpu...``);
``--figure`` regexes pick the ones reported (default: p99s and CPU).

Run::

    python -m bench.ab --pairs 5 --b-env AGENTIK_GC_THRESHOLD=0 -- \\
        bench.load_bench --facades agui --clients 256 --tokens 50 --token-delay 0.02 \\
        --runs-per-client 4 --repeat 1 --interrupts 0 --out {out}
    python -m bench.ab --a-tree /work/base --b-tree /work/head -- \\
        bench.engine_burst --runs 256 --tokens 1 --bursts 3
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = "{out}"
"""Where the bench's arguments name its JSON file; replaced by a path of the tool's."""
DEFAULT_FIGURES = (r"p99", r"cpu")
MODULE = r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+"
"""What follows ``--``: a module in a package, run with ``python -m``."""

__all__ = ["Variant", "flatten", "main", "report", "run_pairs"]


class BenchFailed(RuntimeError):
    """A run of the bench exited with an error or gave no JSON."""


@dataclass(frozen=True, slots=True)
class Variant:
    name: str
    tree: Path
    env: Mapping[str, str] = field(default_factory=dict)
    args: tuple[str, ...] = ()
    """Put after the bench's own arguments (a later option wins in argparse)."""

    def describe(self) -> str:
        env = " ".join(f"{k}={v}" for k, v in self.env.items())
        args = " ".join(self.args)
        return (
            f"{self.name}: {self.tree}"
            + (f" with {env}" if env else "")
            + (f" and {args}" if args else "")
        )


def flatten(value: Any, prefix: str = "") -> dict[str, float]:
    """Every number in ``value`` (booleans aside) by its dotted path."""
    if isinstance(value, bool):
        return {}
    if isinstance(value, (int, float)):
        return {prefix: float(value)}
    items: Sequence[tuple[str, Any]]
    if isinstance(value, Mapping):
        items = [(str(k), v) for k, v in value.items()]
    elif isinstance(value, list):
        items = [(str(i), v) for i, v in enumerate(value)]
    else:
        return {}
    found: dict[str, float] = {}
    for key, item in items:
        found.update(flatten(item, f"{prefix}.{key}" if prefix else key))
    return found


def _last_json(text: str) -> Any:
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return None


def run_once(variant: Variant, bench: Sequence[str], python: str) -> dict[str, float]:
    """One run of ``bench`` as ``variant``: its figures."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(variant.env)
    with tempfile.TemporaryDirectory(prefix="agentik-ab-") as tmp:
        out = Path(tmp) / "result.json"
        given = (*bench, *variant.args)
        args = [arg.replace(OUT, str(out)) for arg in given]
        done = subprocess.run(
            [python, "-m", *args],
            cwd=variant.tree,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            tail = "\n".join(done.stderr.strip().splitlines()[-15:])
            raise BenchFailed(f"{variant.describe()}: exited with {done.returncode}:\n{tail}")
        if any(OUT in arg for arg in given):
            try:
                data = json.loads(out.read_text())
            except (OSError, ValueError) as exc:
                raise BenchFailed(
                    f"{variant.describe()}: no JSON in its {OUT} file: {exc}"
                ) from None
        else:
            data = _last_json(done.stdout)
    if data is None:
        raise BenchFailed(f"{variant.describe()}: printed no JSON object and was given no {OUT}")
    return flatten(data)


def run_pairs(
    a: Variant, b: Variant, bench: Sequence[str], pairs: int, python: str = sys.executable
) -> list[dict[str, dict[str, float]]]:
    """``pairs`` pairs, A first in the even ones and B first in the odd ones."""
    results = []
    for index in range(pairs):
        order = (a, b) if index % 2 == 0 else (b, a)
        pair: dict[str, dict[str, float]] = {}
        for variant in order:
            print(f"pair {index + 1}/{pairs}: {variant.describe()}", file=sys.stderr, flush=True)
            pair[variant.name] = run_once(variant, bench, python)
        results.append(pair)
    return results


def report(results: list[dict[str, dict[str, float]]], figures: Sequence[str]) -> str:
    """A markdown table: each figure's values in A and B, pair by pair, and their medians."""
    patterns = [re.compile(f) for f in figures]
    names = sorted(
        {n for pair in results for n in pair["A"] if any(p.search(n) for p in patterns)}
        & {n for pair in results for n in pair["B"]}
    )
    rows = [
        "| figure | A, pair by pair | B, pair by pair | median A | median B | B / A | B lower |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for name in names:
        both = [(p["A"][name], p["B"][name]) for p in results if name in p["A"] and name in p["B"]]
        a_values, b_values = [v[0] for v in both], [v[1] for v in both]
        a_mid, b_mid = statistics.median(a_values), statistics.median(b_values)
        ratio = f"{b_mid / a_mid:.2f}" if a_mid else "—"
        lower = sum(1 for x, y in both if y < x)
        rows.append(
            f"| `{name}` | {' / '.join(f'{v:g}' for v in a_values)}"
            f" | {' / '.join(f'{v:g}' for v in b_values)}"
            f" | {a_mid:g} | {b_mid:g} | {ratio} | {lower} of {len(both)} |"
        )
    if len(rows) == 2:
        rows.append(f"| (no figure matched {', '.join(figures)}) | | | | | | |")
    return "\n".join(rows)


def _assignment(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name, value


def _tree(text: str) -> Path:
    path = Path(text).resolve()
    if not (path / "bench" / "__init__.py").is_file():
        raise argparse.ArgumentTypeError(f"{text} is not a checkout of this repository")
    return path


def parse(argv: Sequence[str] | None) -> tuple[argparse.Namespace, list[str]]:
    args = list(sys.argv[1:] if argv is None else argv)
    if "--" not in args:
        raise SystemExit("usage: python -m bench.ab [options] -- bench.MODULE [its arguments]")
    split = args.index("--")
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    add = parser.add_argument
    add("--pairs", type=int, default=5, help="pairs of runs (default 5)")
    add("--a-tree", type=_tree, default=ROOT, help="checkout A runs from (default: this)")
    add("--b-tree", type=_tree, default=ROOT, help="checkout B runs from (default: this)")
    add("--a-env", type=_assignment, action="append", default=[], help="NAME=VALUE for A")
    add("--b-env", type=_assignment, action="append", default=[], help="NAME=VALUE for B")
    add("--a-arg", action="append", default=[], help="an argument more for A's bench (--a-arg=-x)")
    add("--b-arg", action="append", default=[], help="an argument more for B's bench (--b-arg=-x)")
    add("--figure", action="append", default=[], help="regex of the figures shown")
    add("--python", default=sys.executable, help="the interpreter each run uses")
    add("--out", type=Path, help="every figure of every run, as JSON")
    options = parser.parse_args(args[:split])
    bench = args[split + 1 :]
    if not bench or not re.fullmatch(MODULE, bench[0]):
        parser.error("after --, name a benchmark module (bench.load_bench, bench.engine_burst)")
    if options.pairs < 1:
        parser.error("--pairs must be at least 1")
    same = (options.a_tree, options.a_env, options.a_arg) == (
        options.b_tree,
        options.b_env,
        options.b_arg,
    )
    if same:
        parser.error("A and B are the same: give --b-tree, --b-env or --b-arg (or the A ones)")
    return options, bench


def main(argv: Sequence[str] | None = None) -> None:
    options, bench = parse(argv)
    a = Variant("A", options.a_tree, dict(options.a_env), tuple(options.a_arg))
    b = Variant("B", options.b_tree, dict(options.b_env), tuple(options.b_arg))
    try:
        results = run_pairs(a, b, bench, options.pairs, options.python)
    except BenchFailed as exc:
        raise SystemExit(f"a run failed, {exc}") from None
    table = report(results, options.figure or DEFAULT_FIGURES)
    if options.out is not None:
        variants = {v.name: v.describe() for v in (a, b)}
        options.out.write_text(json.dumps({"variants": variants, "pairs": results}, indent=2))
    print(f"{a.describe()}\n{b.describe()}\n{' '.join(bench)}\n\n{table}")


if __name__ == "__main__":
    main()
