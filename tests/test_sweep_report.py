"""A sweep's report holds every point of its grid, and nothing a user runs overwrites committed results."""

import subprocess

import pandas as pd
from typer.testing import CliRunner

from pe_bench.cli import app
from pe_bench.config import compose
from pe_bench.sweep import expand, load_sweep, plan, split_overrides

runner = CliRunner()
TINY = ["model.n_layers=1", "model.d_model=32"]


def invoke(*args):
    return runner.invoke(app, list(args))


def test_a_finished_point_trained_with_other_evaluation_settings_is_evaluated_at_the_sweeps(tmp_path):
    res = f"results_dir={tmp_path / 'results'}"
    first = invoke("train", "scheme=alibi", "train=smoke", *TINY, res, "--no-progress")
    assert first.exit_code == 0, first.output
    r = invoke("sweep", "scheme=nope,alibi", "train=smoke", "seed=0", "eval=default", "eval.max_tokens=4096",
               "eval.variants=false", *TINY, res, "--no-progress")
    assert r.exit_code == 0, r.output
    assert "1 trained, 1 skipped" in r.output and "evaluated at this sweep's settings" in r.output
    table = pd.read_csv(tmp_path / "results" / "default" / "comparison.csv")
    assert set(table["scheme"]) == {"nope", "alibi"}  # the skipped point is in the table, not silently dropped


def test_with_no_eval_a_point_evaluated_elsewhere_is_named_in_the_report(tmp_path):
    res = f"results_dir={tmp_path / 'results'}"
    assert invoke("train", "scheme=alibi", "train=smoke", *TINY, res, "--no-progress").exit_code == 0
    r = invoke("sweep", "scheme=nope,alibi", "train=smoke", "seed=0", "eval=default", "eval.max_tokens=4096",
               "eval.variants=false", *TINY, res, "--no-progress", "--no-eval")
    assert r.exit_code == 0, r.output
    table = pd.read_csv(tmp_path / "results" / "default" / "comparison.csv")
    assert set(table["scheme"]) == {"nope"}
    readme = (tmp_path / "results" / "default" / "README.md").read_text()
    assert "alibi-" in readme and "evaluated at other settings only" in readme
    assert "evaluated at other settings only" in r.output


def test_the_sequence_from_the_issue_gives_a_report_of_both_points(tmp_path):
    """`pe-bench train scheme=alibi train=smoke`, then a smoke sweep over NoPE and ALiBi: both in the report."""
    res = f"results_dir={tmp_path / 'results'}"
    assert invoke("train", "scheme=alibi", "train=smoke", *TINY, res, "--no-progress").exit_code == 0
    r = invoke("sweep", "scheme=nope,alibi", "train=smoke", "seed=0", *TINY, res, "--no-progress")
    assert r.exit_code == 0, r.output
    table = pd.read_csv(tmp_path / "results" / "default" / "comparison.csv")
    assert set(table["scheme"]) == {"nope", "alibi"}


def test_train_smoke_brings_eval_smoke_in_a_sweep_as_in_train():
    points = expand(load_sweep("default"), ["scheme=rope", "train=smoke", "seed=0"])
    assert compose(points[0]).eval.name == "smoke"
    assert compose(expand(load_sweep("default"), ["scheme=rope", "seed=0"])[0]).eval.name == "default"
    assert compose(expand(load_sweep("default"), ["scheme=rope", "train=smoke", "eval=default"])[0]).eval.name == "default"


def test_smoke_evaluation_has_no_eval_time_variants_unless_asked():
    assert compose(["train=smoke"]).eval.variants is False
    assert compose(["train=smoke", "eval.variants=true"]).eval.variants is True


def _git_repo_with_committed_report(root, name="default", runs=()):
    """A git checkout whose results/<name> is a committed report made from ``runs`` (its results.json)."""
    import json

    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / "results" / name).mkdir(parents=True)
    (root / "results" / name / "comparison.md").write_text("committed\n")
    (root / "results" / name / "results.json").write_text(json.dumps({"runs": {r: {} for r in runs}, "files": []}))
    subprocess.run(["git", "-C", str(root), "add", "."], check=True)
    return root / "results"


def _grid(*args):
    """The run names of a sweep's points."""
    name, sweep_keys, run_keys = split_overrides(list(args))
    return [p.run.path.name for p in plan(expand(load_sweep(name, sweep_keys), run_keys))]


def test_a_sweep_with_another_grid_refuses_to_overwrite_committed_results(tmp_path):
    results = _git_repo_with_committed_report(tmp_path, runs=_grid("scheme=nope,alibi", "train=smoke", "seed=0"))
    r = invoke("sweep", "scheme=nope", "train=smoke", "seed=0", f"results_dir={results}", "--dry-run")
    assert r.exit_code == 2
    assert "holds committed results" in r.output and "--out" in r.output and "alibi-" in r.output
    assert not (results / "runs").exists()  # refused before anything exists
    assert (results / "default" / "comparison.md").read_text() == "committed\n"


def test_a_sweep_renamed_to_a_committed_reports_name_is_refused_whatever_names_it(tmp_path):
    """sweep.name=default, a sweep YAML whose name is 'default', or --out naming the committed directory: the grid
    decides, not the name."""
    results = _git_repo_with_committed_report(tmp_path, "paper", runs=_grid("sweep=paper"))
    plugin = tmp_path / "mine" / "configs" / "sweep"
    plugin.mkdir(parents=True)
    (plugin / "mini.yaml").write_text("defaults:\n  - default\n  - _self_\nname: paper\nschemes: [nope]\nseeds: [0]\n"
                                      "scheme_variants: []\n")
    for args in (["sweep=default", "sweep.name=paper", "scheme=nope", "seed=0"], ["sweep=mini"],
                 ["scheme=nope", "seed=0", "--out", str(results / "paper")]):
        r = runner.invoke(app, ["sweep", *args, f"results_dir={results}", "--dry-run"],
                          env={"PE_BENCH_PATH": str(tmp_path / "mine")})
        assert r.exit_code == 2, (args, r.output)
        assert "holds committed results" in r.output and "made from another grid" in r.output, args
    assert not (results / "runs").exists()


def test_a_committed_report_without_a_readable_results_json_is_never_written_by_a_sweep(tmp_path):
    results = _git_repo_with_committed_report(tmp_path, "paper", runs=_grid("sweep=paper"))
    (results / "paper" / "results.json").write_text("{not json")
    r = invoke("sweep", "sweep=paper", f"results_dir={results}", "--dry-run")
    assert r.exit_code == 2 and "unreadable" in r.output and "--out" in r.output


def test_the_same_sweep_or_a_named_out_may_write_and_dry_run_says_where(tmp_path):
    results = _git_repo_with_committed_report(tmp_path, "paper", runs=_grid("sweep=paper"))
    r = invoke("sweep", "sweep=paper", f"results_dir={results}", "--dry-run")  # the committed grid itself: fine
    assert r.exit_code == 0, r.output
    r = invoke("sweep", "scheme=nope", "train=smoke", "seed=0", f"results_dir={results}", "--dry-run",
               "--out", str(tmp_path / "elsewhere"))
    assert r.exit_code == 0, r.output
    said = " ".join(r.output.split())
    assert f"the report to {tmp_path / 'elsewhere'}" in said and f"runs go to {results / 'runs'}" in said


def _tables(out):
    """What a report says, without its title: comparison.csv, comparison.md's body, eval_long.csv, results.json's
    tables."""
    import json

    md = (out / "comparison.md").read_text().split("\n", 1)[1]
    data = json.loads((out / "results.json").read_text())
    data.pop("title", None)
    data.pop("command", None)
    return ((out / "comparison.csv").read_text(), md, (out / "eval_long.csv").read_text(),
            json.dumps(data.get("tables", data), sort_keys=True))


def test_the_main_jobs_sweep_at_smoke_scale_writes_the_tables_that_report_writes_from_its_runs(tmp_path):
    """`pe-bench sweep sweep=paper` keeps every mode its evaluation produced: eval.max_tokens=null (the whole split,
    recorded as budget 'all') keeps the non-overlapping rows, their plot and the context-use table."""
    res = f"results_dir={tmp_path / 'results'}"
    r = invoke("sweep", "sweep=paper", "scheme=nope,alibi", "train=smoke", "eval.max_tokens=null",
               "eval.lengths=[32,64]", *TINY, res, "--no-progress", "--out", str(tmp_path / "swept"))
    assert r.exit_code == 0, r.output
    swept = tmp_path / "swept"
    table = pd.read_csv(swept / "comparison.csv")
    assert set(table["mode"]) == {"nonoverlapping", "sliding"}
    assert (swept / "ppl_vs_length_nonoverlapping.png").exists()
    r = invoke("report", str(tmp_path / "results" / "runs"), "--out", str(tmp_path / "reported"))
    assert r.exit_code == 0, r.output
    assert _tables(swept) == _tables(tmp_path / "reported")
    assert sorted(p.name for p in swept.iterdir()) == sorted(p.name for p in (tmp_path / "reported").iterdir())
