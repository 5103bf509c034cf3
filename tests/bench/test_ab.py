"""``bench.ab``: two variants of a bench alternated in pairs, figure by figure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import ab


def _probe(*, out: bool = False) -> list[str]:
    return ["tests.bench.ab_probe", *(["--out", ab.OUT] if out else [])]


def test_every_number_is_a_figure_named_by_its_path() -> None:
    data = {"levels": {"256": [{"agui": {"p99": 12, "errors": 0, "ok": True, "name": "x"}}]}}
    assert ab.flatten(data) == {"levels.256.0.agui.p99": 12.0, "levels.256.0.agui.errors": 0.0}


@pytest.mark.parametrize("out", [False, True])
def test_pairs_alternate_and_each_side_runs_with_its_own_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, out: bool
) -> None:
    log = tmp_path / "order.log"
    monkeypatch.setenv("AB_LOG", str(log))
    a = ab.Variant("A", ab.ROOT, {"AB_NAME": "A", "AB_P99": "100", "AB_CPU": "2"})
    b = ab.Variant("B", ab.ROOT, {"AB_NAME": "B", "AB_P99": "80", "AB_CPU": "2.5"})
    results = ab.run_pairs(a, b, _probe(out=out), pairs=3)
    assert log.read_text().split() == ["A", "B", "B", "A", "A", "B"]
    assert [r["A"]["first_token_p99_ms"] for r in results] == [100.0] * 3
    assert [r["B"]["cpu_s.engine"] for r in results] == [2.5] * 3
    table = ab.report(results, ab.DEFAULT_FIGURES)
    p99 = "| `first_token_p99_ms` | 100 / 100 / 100 | 80 / 80 / 80 | 100 | 80 | 0.80 | 3 of 3 |"
    assert p99 in table
    assert "| `cpu_s.engine` | 2 / 2 / 2 | 2.5 / 2.5 / 2.5 | 2 | 2.5 | 1.25 | 0 of 3 |" in table


def test_a_failed_run_is_reported_with_what_it_said(tmp_path: Path) -> None:
    a = ab.Variant("A", ab.ROOT, {"AB_P99": "1"})
    b = ab.Variant("B", ab.ROOT, {"AB_EXIT": "3"})
    with pytest.raises(ab.BenchFailed, match=r"B: .* exited with 3:\nthe probe was told to fail"):
        ab.run_pairs(a, b, _probe(), pairs=1)


def test_the_command_line_refuses_what_cannot_compare(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="usage"):
        ab.parse(["--pairs", "2", "tests.bench.ab_probe"])
    for argv in (
        ["--", "tests.bench.ab_probe"],  # A and B the same
        ["--b-env", "X=1", "--", "python", "-m", "bench.x"],  # not a module name
        ["--b-env", "X=1", "--pairs", "0", "--", "tests.bench.ab_probe"],
        ["--b-env", "no-equals", "--", "tests.bench.ab_probe"],
        ["--b-tree", str(tmp_path), "--", "tests.bench.ab_probe"],  # not a checkout
    ):
        with pytest.raises(SystemExit):
            ab.parse(argv)
    options, bench = ab.parse(["--b-env", "X=1", "--", "tests.bench.ab_probe", "--out", ab.OUT])
    assert (options.b_env, bench) == ([("X", "1")], ["tests.bench.ab_probe", "--out", "{out}"])
    options, _ = ab.parse(["--b-arg=--web-workers=1", "--", "tests.bench.ab_probe"])
    assert (options.a_arg, options.b_arg) == ([], ["--web-workers=1"])


def test_a_variants_arguments_go_after_the_benchs_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "order.log"
    monkeypatch.setenv("AB_LOG", str(log))
    a = ab.Variant("A", ab.ROOT, {"AB_P99": "5"})
    b = ab.Variant("B", ab.ROOT, {"AB_P99": "5"}, ("--name", "second"))
    results = ab.run_pairs(a, b, ["tests.bench.ab_probe", "--name", "first"], pairs=1)
    assert log.read_text().split() == ["first", "second"]
    assert results[0]["B"]["first_token_p99_ms"] == 5.0
    assert b.describe().endswith("and --name second")


def test_main_prints_the_table_and_keeps_every_figure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    saved = tmp_path / "ab.json"
    options = ["--pairs", "2", "--a-env", "AB_P99=10", "--b-env", "AB_P99=12"]
    ab.main([*options, "--out", str(saved), "--figure", "p99", "--", "tests.bench.ab_probe"])
    printed = capsys.readouterr().out
    assert "| `first_token_p99_ms` | 10 / 10 | 12 / 12 | 10 | 12 | 1.20 | 0 of 2 |" in printed
    assert "cpu_s" not in printed
    kept = json.loads(saved.read_text())
    assert kept["variants"]["B"].endswith("with AB_P99=12")
    assert [pair["B"]["first_token_p99_ms"] for pair in kept["pairs"]] == [12.0, 12.0]


@pytest.mark.parametrize("env", [{"AB_NO_OUT": "1"}, {}])
def test_a_bench_that_leaves_no_json_is_a_failed_run(env: dict[str, str]) -> None:
    a = ab.Variant("A", ab.ROOT, {"AB_P99": "1"})
    # B is given {out} in its own arguments only; without AB_NO_OUT the probe writes it.
    b = ab.Variant("B", ab.ROOT, env, ("--out", ab.OUT))
    bench = ["tests.bench.ab_probe"]
    if env:
        with pytest.raises(ab.BenchFailed, match=r"B: .*no JSON in its \{out\} file"):
            ab.run_pairs(a, b, bench, pairs=1)
    else:
        results = ab.run_pairs(a, b, bench, pairs=1)
        assert results[0]["B"]["first_token_p99_ms"] == 0.0
