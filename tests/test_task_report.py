"""Task runs end to end through the CLI: train, eval, report (the row rules of the perplexity tables: seeds averaged,
diverged never averaged in, unfinished or altered runs left out by name), a task sweep, and analyze."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from typer.testing import CliRunner

from pe_bench.cli import app
from pe_bench.runs import Run
from pe_bench.report import collect_accuracy
from pe_bench.report.accuracy import accuracy_table

runner = CliRunner()
TINY = ["train=smoke", "model.n_layers=2", "model.d_model=32", "model.n_heads=2", "eval.variants=false",
        "--no-progress"]


def train(results, *args) -> Run:
    """The run this command trained: the one directory it added (not the latest mtime, which two runs written
    within one clock tick can share)."""
    before = set((results / "runs").glob("*"))
    r = runner.invoke(app, ["train", *args, *TINY, f"results_dir={results}"])
    assert r.exit_code == 0, r.output
    (new,) = set((results / "runs").glob("*")) - before
    return Run(new)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    root = tmp_path_factory.mktemp("task-runs")
    for seed in (0, 1):
        train(root, "task=passkey", "scheme=alibi", f"seed={seed}", "task.depths=3", "task.eval_examples=8")
    train(root, "task=copy", "scheme=rope", "task.eval_examples=8")
    return root


def test_a_task_run_writes_accuracy_rows_by_length_and_depth(results):
    run = Run(next((results / "runs").glob("passkey-alibi-*-s0-*")))
    rows = pd.read_csv(run.accuracy_csv)
    assert sorted(rows["L_eval"].unique()) == [32, 64, 128, 256]  # train=smoke: L = 32, eval at 1…8 L
    assert sorted(rows["depth"].unique()) == [0.0, 0.5, 1.0]
    assert (rows["status"] == "ok").all() and (rows["examples"] == 8).all()
    assert rows["exact_match"].between(0, 1).all()
    meta = run.meta()
    assert meta.status == "done" and meta.accuracy_csv_sha256
    assert not run.eval_csv.exists()


def test_report_averages_seeds_and_writes_tables_and_plots(results, tmp_path):
    out = tmp_path / "report"
    r = runner.invoke(app, ["report", str(results), "--out", str(out)])
    assert r.exit_code == 0, r.output
    for name in ("accuracy.md", "accuracy.csv", "accuracy_long.csv", "accuracy_vs_length.png",
                 "passkey_heatmap.png"):
        assert (out / name).exists(), name
    wide = pd.read_csv(out / "accuracy.csv")
    passkey = wide[(wide["task"] == "passkey") & (wide["metric"] == "exact_match")]
    assert len(passkey) == 1 and int(passkey["seeds"].iloc[0]) == 2  # two seeds, one row
    assert "±" in str(passkey["32"].iloc[0])
    assert "## copy: exact match" in (out / "accuracy.md").read_text()
    readme = (out / "README.md").read_text()  # the report's own page: its command, runs, tables and figures
    assert f"pe-bench report {results}\n" in readme and "- 3 runs: 3 done\n" in readme
    assert "### copy: exact match" in readme and "![passkey_heatmap.png](passkey_heatmap.png)" in readme
    from test_report import check_pages

    check_pages(out, f"pe-bench report {results}", runs=3)


def test_diverged_unfinished_and_altered_runs_are_never_averaged_in(results, tmp_path):
    import shutil

    root = tmp_path / "copy"
    shutil.copytree(results, root)
    runs = [Run(p) for p in sorted((root / "runs").iterdir())]
    s0, s1 = (r for r in runs if r.path.name.startswith("passkey"))
    meta = s1.meta()
    s1.meta_path.write_text(json.dumps({**meta.to_json(), "status": "diverged", "diverged_step": 7}))
    acc = collect_accuracy(runs)
    table = accuracy_table(acc.df, "passkey")
    assert set(table.iloc[0][["32", "64", "128", "256"]]) == {"diverged"}
    s1.meta_path.write_text(json.dumps({**meta.to_json(), "status": "running"}))
    acc = collect_accuracy(runs)
    assert any("is not finished" in line and s1.path.name in line for line in acc.left_out)
    assert int(accuracy_table(acc.df, "passkey")["seeds"].iloc[0]) == 1
    s1.meta_path.write_text(meta.dumps())
    s0.accuracy_csv.write_text(s0.accuracy_csv.read_text().replace(",ok,", ",ok,", 1) + "\n")
    acc = collect_accuracy(runs)
    assert any("does not match the checksum" in line for line in acc.left_out)


def test_eval_adds_lengths_to_a_task_run(results):
    run = Run(next((results / "runs").glob("copy-rope-*")))
    r = runner.invoke(app, ["eval", str(run.path), "eval.lengths=[48]"])
    assert r.exit_code == 0, r.output
    assert 48 in set(pd.read_csv(run.accuracy_csv)["L_eval"])
    assert "updated" in r.output and "accuracy.csv" in r.output


def test_analyze_writes_attention_statistics_for_a_task_run(results):
    run = Run(next((results / "runs").glob("copy-rope-*")))
    r = runner.invoke(app, ["analyze", str(run.path), "--examples", "2", "--buckets", "4"])
    assert r.exit_code == 0, r.output
    df = pd.read_csv(run.path / "analysis" / "attention.csv")
    assert sorted(df["L_eval"].unique()) == [32, 64, 128, 256]
    assert set(df["layer"]) == {0, 1} and set(df["head"]) == {0, 1}
    assert df["entropy_norm"].between(0, 1 + 1e-6).all() and (df["distance"] >= 0).all()
    assert (run.path / "analysis" / "attention.png").exists()
    assert "L_eval=256: queries < L" in " ".join(r.output.split())


def test_analyze_refuses_a_directory_that_is_not_a_run(tmp_path):
    r = runner.invoke(app, ["analyze", str(tmp_path)])
    assert r.exit_code == 2 and "is not a trained run directory" in r.output


def test_a_task_sweep_trains_every_point_and_reports_accuracy(tmp_path):
    r = runner.invoke(app, ["sweep", "sweep=tasks", "scheme=nope,alibi", "seed=0", "sweep.grid.task=[copy]",
                            "train=smoke", "model.n_layers=1", "model.d_model=32", "task.eval_examples=4",
                            "eval.variants=false", f"results_dir={tmp_path}", "--no-progress"])
    assert r.exit_code == 0, r.output
    assert sorted(p.name.split("-")[1] for p in (tmp_path / "runs").iterdir()) == ["alibi", "nope"]
    md = (tmp_path / "tasks" / "accuracy.md").read_text()
    assert "| alibi |" in md and "| nope |" in md


def test_analyze_a_language_model_run_on_text_windows(tmp_path):
    run = train(tmp_path, "scheme=alibi", "eval.modes=[nonoverlapping]", "eval.lengths=[32,64]")
    r = runner.invoke(app, ["analyze", str(run.path), "--examples", "3", "--buckets", "8", "--out", str(tmp_path / "a")])
    assert r.exit_code == 0, r.output
    df = pd.read_csv(tmp_path / "a" / "attention.csv")
    assert sorted(df["L_eval"].unique()) == [32, 64] and set(df["task"]) == {"lm"}
    assert (df.groupby(["L_eval", "layer", "head"])["queries"].sum() == df["L_eval"].groupby(
        [df["L_eval"], df["layer"], df["head"]]).first() * 3).all()  # every query position of 3 windows, once
    # the training length is a bucket edge: no bucket straddles it
    assert not ((df["q_start"] < 32) & (df["q_end"] > 32)).any()


def test_accuracy_csv_has_the_documented_columns_and_its_checksum_in_meta_json(results):
    from pe_bench.runs import file_sha256

    run = Run(next((results / "runs").glob("passkey-alibi-*-s0-*")))
    rows = pd.read_csv(run.accuracy_csv)
    assert list(rows.columns) == ["task", "scheme", "base_scheme", "model", "L_train", "L_eval", "ratio", "depth",
                                  "exact_match", "token_accuracy", "solved", "examples", "answer_tokens", "seed",
                                  "step", "precision", "status", "note", "outcomes", "heldout"]
    ok = rows[rows["status"] == "ok"]  # one x (solved) or . per held-out example, in order
    assert all(len(o) == n and o.count("x") == s for o, n, s in zip(ok["outcomes"], ok["examples"], ok["solved"]))
    assert set(rows["status"]) <= {"ok", "not_applicable", "nonfinite"} and set(rows["precision"]) == {"fp32"}
    assert run.meta().accuracy_csv_sha256 == file_sha256(run.accuracy_csv)


def test_report_writes_the_leaderboard_and_compares_two_rows_on_the_same_examples(results, tmp_path):
    import shutil

    root = tmp_path / "runs"
    shutil.copytree(results, root)
    train(root, "task=copy", "scheme=nope", "task.eval_examples=8")
    out = tmp_path / "report"
    r = runner.invoke(app, ["report", str(root), "--out", str(out)])
    assert r.exit_code == 0, r.output
    board = pd.read_csv(out / "leaderboard.csv")
    assert set(zip(board["task"], board["scheme"])) == {("passkey", "alibi"), ("copy", "rope"), ("copy", "nope")}
    assert set(board["status"]) <= {"ok", "not learnt at L", "at chance at L"}
    assert "effective length" in (out / "leaderboard.md").read_text()
    r = runner.invoke(app, ["report", str(root), "--compare", "rope", "nope"])
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert "paired difference of exact match acc(rope) − acc(nope)" in text
    assert "verdict: copy (L=32): rope higher at" in text and "of 4 lengths than nope (paired, 95 %)" in text
    r = runner.invoke(app, ["report", str(root), "--compare", "rope", "alibi"])  # never on the same task
    assert r.exit_code == 2 and "no task and length where both were scored" in r.output


def test_the_committed_task_runs_rebuild_the_committed_task_tables_and_leaderboard(tmp_path):
    """results/tasks/COMMAND.txt: `pe-bench report results/tasks/runs` rebuilds the committed accuracy tables and
    effective-length leaderboard, every number and interval, byte for byte; and results/leaderboard is the same runs
    beside the default sweep's perplexity runs."""
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "results"
    r = runner.invoke(app, ["report", str(root / "tasks" / "runs"), "--out", str(tmp_path / "t"), "--no-plots"])
    assert r.exit_code == 0, r.output
    for name in ("accuracy.csv", "accuracy_long.csv", "leaderboard.csv", "accuracy.md", "leaderboard.md"):
        assert (tmp_path / "t" / name).read_bytes() == (root / "tasks" / name).read_bytes(), name
    board = pd.read_csv(root / "leaderboard" / "leaderboard.csv")
    assert board.equals(pd.read_csv(tmp_path / "t" / "leaderboard.csv"))
    assert "perplexity 8L/L (L=64)" in (root / "leaderboard" / "leaderboard.md").read_text()


def test_eval_on_the_development_examples_writes_beside_the_reported_rows_never_into_them(results, tmp_path):
    import shutil

    run = Run(shutil.copytree(next((results / "runs").glob("copy-rope-*")), tmp_path / "runs" / "copy-run"))
    before = run.accuracy_csv.read_bytes()
    r = runner.invoke(app, ["eval", str(run.path), "eval.heldout=dev", "--no-progress"])
    assert r.exit_code == 0, r.output
    assert run.accuracy_csv.read_bytes() == before  # the reported rows are untouched
    dev = pd.read_csv(run.accuracy_dev_csv)
    test = pd.read_csv(run.accuracy_csv)
    assert set(dev["L_eval"]) == {32, 64, 128, 256} <= set(test["L_eval"])
    assert set(dev["heldout"]).isdisjoint(set(test["heldout"]))  # other examples
    bad = runner.invoke(app, ["train", "eval.heldout=dev", "train=smoke", f"results_dir={tmp_path}"])
    assert bad.exit_code == 2 and "eval.heldout=dev is read by the synthetic tasks only" in bad.output


def test_the_leaderboard_floor_is_the_larger_of_chance_and_the_trivial_baseline(results, tmp_path):
    out = tmp_path / "report"
    r = runner.invoke(app, ["report", str(results), "--out", str(out), "--no-plots"])
    assert r.exit_code == 0, r.output
    md = (out / "leaderboard.md").read_text()
    assert "Floors, L = 32: chance" in md and "trivial baseline" in md
    board = pd.read_csv(out / "leaderboard.csv")
    assert "baseline_at_effective" in board.columns


@pytest.mark.slow
def test_the_committed_leaderboard_rebuilds_byte_for_byte_from_the_committed_runs(tmp_path):
    """`pe-bench report results/default/runs results/tasks/runs --out results/leaderboard`: the task runs beside the default sweep's language-model runs give the committed
    leaderboard, the perplexity columns included."""
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "results"
    r = runner.invoke(app, ["report", str(root / "default" / "runs"), str(root / "tasks" / "runs"), "--out",
                            str(tmp_path / "board"), "--no-plots"])
    assert r.exit_code == 0, r.output
    for name in ("leaderboard.csv", "leaderboard.md", "accuracy.csv"):
        assert (tmp_path / "board" / name).read_bytes() == (root / "leaderboard" / name).read_bytes(), name
