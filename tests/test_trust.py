"""No silent wrong number: each way a table could show a number that looks right but is not, and what happens now.

One test per case found in review (issue 9): mixed configurations averaged as seeds, a diverged run recorded as a
success, an unfinished run evaluated as finished, a checkpoint evaluated as another run, rows replaced by a re-run,
a finished run rewritten by eval settings, bad eval.csv files used in part; and the faults (disk full, two
processes, a signal during eval, stale temporary files, a corrupt run directory in a sweep)."""

import errno
import json
import shutil

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from pe_bench.cli import app
from pe_bench.distributed import clear_stop, request_stop
from pe_bench.runs import Run

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def runs_of(results, prefix=""):
    return sorted(p for p in (results / "runs").iterdir() if p.name.startswith(prefix))


@pytest.fixture
def stop_flag():
    """A stop request (what SIGTERM/SIGUSR1 set) for the next command; cleared afterwards."""
    request_stop()
    yield
    clear_stop()


# 1 ------------------------------------------------------------------------------------------------------------------
def test_a_row_is_one_configuration_never_a_mean_across_configurations(smoke_args, tmp_path):
    r = invoke("sweep", "scheme=nope", "seed=0", *smoke_args[:-1], "model.n_layers=1,2", f"results_dir={tmp_path / 'res'}",
               "eval.variants=false", "--no-progress")
    assert r.exit_code == 0, r.output
    table = pd.read_csv(tmp_path / "res" / "default" / "comparison.csv")
    rows = table[table["mode"] == "nonoverlapping"]
    assert sorted(rows["scheme"]) == ["nope · model.n_layers=1", "nope · model.n_layers=2"]
    assert (rows["seeds"] == 1).all()
    # a second tokenizer-free axis in another folder: one report over both keeps every configuration apart
    r = invoke("sweep", "scheme=nope", "seed=0", "model.d_model=32", "train=smoke", "eval=smoke", "model.n_layers=1",
               f"results_dir={tmp_path / 'other'}", "eval.variants=false", "--no-progress")
    assert r.exit_code == 0, r.output
    r = invoke("report", tmp_path / "res", tmp_path / "other", "--out", tmp_path / "rep", "--no-plots")
    assert r.exit_code == 0, r.output
    t = pd.read_csv(tmp_path / "rep" / "comparison.csv")
    t = t[t["mode"] == "nonoverlapping"]
    assert len(t) == 3 and (t["seeds"] == 1).all()
    assert {"nope · model.d_model=32 · model.n_layers=1", "nope · model.d_model=64 · model.n_layers=2"} <= set(
        t["scheme"])


# 2 ------------------------------------------------------------------------------------------------------------------
def test_a_diverged_run_is_diverged_everywhere(smoke_args, tmp_path):
    smoke_args = ["train=smoke", "eval=smoke", smoke_args[-1]]  # the tiny model: lr=10 overflows its gradients
    r = invoke("train", "scheme=alibi", "train.lr=10", "train.warmup_steps=1", *smoke_args, "--no-progress")
    assert r.exit_code == 1 and "training diverged at step" in r.output and "lower train.lr" in r.output
    run = runs_of(tmp_path / "results")[0]
    meta = json.loads((run / "meta.json").read_text())
    assert meta["status"] == "diverged" and meta["diverged_step"] >= 1 and meta["diverged_value"] in ("nan", "inf")
    assert not (run / "eval.csv").exists()
    if (run / "checkpoint.pt").exists():  # the last checkpoint predates the first non-finite step
        import torch

        ckpt = torch.load(run / "checkpoint.pt", weights_only=False)
        assert ckpt["step"] < meta["diverged_step"]
        assert all(torch.isfinite(v).all() for v in ckpt["model"].values() if v.is_floating_point())
    r = invoke("report", tmp_path / "results", "--out", tmp_path / "rep", "--no-plots")
    assert r.exit_code == 0, r.output
    md = (tmp_path / "rep" / "comparison.md").read_text()
    assert "| alibi | 32 | diverged | diverged | diverged | diverged | diverged | 1 | — |" in md
    # the sweep counts it as a failure and does not train it again
    r = invoke("sweep", "scheme=alibi", "seed=0", "train.lr=10", "train.warmup_steps=1", *smoke_args,
               "--no-progress")
    assert r.exit_code == 1 and "diverged before (not retried)" in r.output and "1 failed" in r.output


def test_a_nonfinite_evaluation_is_nan_not_ok():
    from pe_bench.evaluate.perplexity import Pass, Score, _row

    row = _row({"scheme": "x"}, Pass("nonoverlapping", 64, 0, 1024, 1024, ""), Score(nll=float("nan"), tokens=10,
                                                                                     bytes=10))
    assert row["status"] == "nonfinite" and row["ppl"] == "nan"
    from pe_bench.report import comparison

    df = pd.DataFrame([{"scheme": "x", "L_train": 64, "L_eval": 64, "mode": "nonoverlapping", "split": "validation",
                        "stride": 64, "ppl": float("nan"), "seed": s, "status": st, "tokens_scored": 10}
                       for s, st in ((0, "ok"), (1, "nonfinite"))])
    df.loc[0, "ppl"] = 5.0
    assert comparison(df, "nonoverlapping").loc[("x", 64), "64"] == "nan"  # never the mean of the finite seed


# 3 ------------------------------------------------------------------------------------------------------------------
def test_an_unfinished_run_is_refused_unless_partial_and_then_labelled(smoke_args, tmp_path):
    request_stop()  # what SIGTERM sets: training stops after its first step with a checkpoint
    try:
        r = invoke("train", "scheme=nope", *smoke_args, "--no-progress")
    finally:
        clear_stop()
    assert r.exit_code == 3, r.output
    run = runs_of(tmp_path / "results")[0]
    r = invoke("eval", run)
    assert r.exit_code == 2 and "is not finished (status interrupted, checkpoint at step 1 of 20)" in r.output
    assert not (run / "eval.csv").exists()
    r = invoke("eval", run, "--partial", "eval.variants=false")
    assert r.exit_code == 0, r.output
    ev = pd.read_csv(run / "eval.csv")
    assert (ev["step"] == 1).all()
    r = invoke("report", tmp_path / "results", "--out", tmp_path / "rep", "--no-plots")
    assert r.exit_code == 0, r.output
    assert set(pd.read_csv(tmp_path / "rep" / "comparison.csv")["scheme"]) == {"nope · step 1/20"}
    with Run(run).lock():  # another process training it: eval touches nothing
        r = invoke("eval", run, "--partial")
    assert r.exit_code == 4 and "another process" in r.output


# 4 ------------------------------------------------------------------------------------------------------------------
def test_a_run_is_never_evaluated_as_something_it_is_not(smoke_args, tmp_path):
    for scheme in ("alibi", "rope"):
        assert invoke("train", f"scheme={scheme}", "eval.variants=false", *smoke_args, "--no-progress").exit_code == 0
    alibi, rope = runs_of(tmp_path / "results", "alibi")[0], runs_of(tmp_path / "results", "rope")[0]
    before = (rope / "eval.csv").read_bytes()
    r = invoke("eval", rope, "scheme=alibi")
    assert r.exit_code == 2 and "this run was trained with rope" in r.output and "scheme.scaling.*" in r.output
    r = invoke("eval", rope, "scheme.base=500")
    assert r.exit_code == 2 and "scheme.base is fixed at training for rope" in r.output
    r = invoke("eval", alibi, "scheme.learned_slopes=true")
    assert r.exit_code == 2 and "eval-time options of alibi: none" in r.output
    shutil.copy(alibi / "checkpoint.pt", rope / "checkpoint.pt")
    r = invoke("eval", rope)
    assert r.exit_code == 2 and "belongs to another configuration" in r.output
    r = invoke("train", "scheme=rope", "eval.variants=false", "eval.max_tokens=1024", *smoke_args, "--no-progress")
    assert r.exit_code == 2 and "belongs to another configuration" in r.output
    assert (rope / "eval.csv").read_bytes() == before


# 5, 6 ---------------------------------------------------------------------------------------------------------------
def test_rerunning_a_finished_run_adds_rows_and_never_rewrites_it(smoke_args, tmp_path):
    assert invoke("train", "scheme=alibi", *smoke_args, "--no-progress").exit_code == 0
    run = runs_of(tmp_path / "results")[0]
    config, meta = (run / "config.yaml").read_bytes(), json.loads((run / "meta.json").read_text())
    ev = pd.read_csv(run / "eval.csv")
    r = invoke("train", "scheme=alibi", "eval.max_tokens=1024", "eval.stride=5", *smoke_args, "--no-progress")
    assert r.exit_code == 0, r.output
    ev2 = pd.read_csv(run / "eval.csv")
    assert len(ev2) == 2 * len(ev)  # the new settings' rows sit beside the old ones
    assert ev2.merge(ev).shape[0] == len(ev)  # the old rows are untouched
    assert set(ev2["budget"]) == {2048, 1024, 512} and set(ev2[ev2["mode"] == "sliding"]["S"]) == {8, 5}
    assert set(ev2["precision"]) == {"fp32"}  # bf16 rows (autocast on CUDA) would sit beside these
    meta2 = json.loads((run / "meta.json").read_text())
    assert (run / "config.yaml").read_bytes() == config
    assert meta2["status"] == "done" and meta2["wall_seconds"] == meta["wall_seconds"]
    again = invoke("train", "scheme=alibi", "eval.max_tokens=1024", "eval.stride=8", *smoke_args, "--no-progress")
    assert again.exit_code == 0 and pd.read_csv(run / "eval.csv").equals(ev2)  # nothing missing: nothing done
    r = invoke("train", "scheme=alibi", "eval.stride=-1", *smoke_args, "--no-progress")
    assert r.exit_code == 2 and "eval.stride" in r.output
    assert json.loads((run / "meta.json").read_text())["status"] == "done"
    # two tables: one per evaluation setting, never a mean across them
    r = invoke("report", run, "--out", tmp_path / "rep", "--no-plots", "--mode", "nonoverlapping")
    t = pd.read_csv(tmp_path / "rep" / "comparison.csv")
    assert r.exit_code == 0 and sorted(t["scheme"]) == ["alibi · tokens=1024", "alibi · tokens=2048"]


# 8 ------------------------------------------------------------------------------------------------------------------
def test_report_leaves_out_bad_eval_files_by_name_and_goes_on(smoke_args, tmp_path):
    r = invoke("sweep", "scheme=nope,alibi,rope,t5", "seed=0", "eval.variants=false", *smoke_args, "--no-progress")
    assert r.exit_code == 0, r.output
    nope, alibi, rope, t5 = (runs_of(tmp_path / "results", s)[0] for s in ("nope", "alibi", "rope", "t5"))
    text = (alibi / "eval.csv").read_text()
    (alibi / "eval.csv").write_text(text[: len(text) // 2])  # truncated mid-row
    (rope / "eval.csv").write_text(text.splitlines()[0] + "\n")  # header only
    (t5 / "eval.csv").write_bytes(b"\x00\x01PK\x03\x04" * 50)  # binary
    lines = text.splitlines(keepends=True)
    (nope / "meta.json").write_text((nope / "meta.json").read_text())  # untouched: stays in
    r = invoke("report", tmp_path / "results", "--out", tmp_path / "rep", "--no-plots")
    assert r.exit_code == 0, r.output
    out = " ".join(r.output.split())
    assert "3 run directories left out" in out
    assert f"{alibi / 'eval.csv'} does not match the checksum" in out
    assert f"{rope / 'eval.csv'} does not match the checksum" in out or "header and no rows" in out
    assert f"{t5 / 'eval.csv'} is binary" in out or f"{t5 / 'eval.csv'} is unreadable" in out
    assert set(pd.read_csv(tmp_path / "rep" / "comparison.csv")["scheme"]) == {"nope"}
    # without a checksum to compare (a file from elsewhere), the file itself is checked
    meta = json.loads((alibi / "meta.json").read_text())
    meta.pop("eval_csv_sha256")
    (alibi / "meta.json").write_text(json.dumps(meta))
    (alibi / "eval.csv").write_text("".join(lines[:-1]) + lines[-1][:20])
    r = invoke("report", alibi, "--out", tmp_path / "rep2", "--no-plots")
    assert r.exit_code == 2 and "has the wrong number of fields" in " ".join(r.output.split())


# Faults -------------------------------------------------------------------------------------------------------------
def test_disk_full_while_checkpointing_fails_the_run_and_leaves_no_temporary_file(smoke_args, tmp_path, monkeypatch):
    from pathlib import Path

    write_bytes = Path.write_bytes

    def full(self, data):  # the disk fills up half-way through the checkpoint's temporary file
        if "checkpoint" not in self.name:
            return write_bytes(self, data)
        write_bytes(self, b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_bytes", full)  # runs.atomic_save writes the serialized checkpoint with it
    r = invoke("train", "scheme=nope", *smoke_args, "--no-progress")
    assert r.exit_code == 1 and "No space left on device writing" in r.output and "checkpoint.pt: free" in r.output
    run = runs_of(tmp_path / "results")[0]
    meta = json.loads((run / "meta.json").read_text())
    assert meta["status"] == "failed" and "No space left on device" in meta["error"]
    assert not list(run.glob(".*.tmp")) and not (run / "checkpoint.pt").exists()


def test_the_loser_of_two_trains_touches_nothing_and_stale_temporaries_are_cleaned(smoke_args, tmp_path):
    assert invoke("train", "scheme=nope", *smoke_args, "--no-progress").exit_code == 0
    run = runs_of(tmp_path / "results")[0]
    snapshot = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    (run / "config.yaml").write_text((run / "config.yaml").read_text())  # the same bytes, a new mtime
    with Run(run).lock():
        r = invoke("train", "scheme=nope", "eval.max_tokens=1024", *smoke_args, "--no-progress")
    assert r.exit_code == 4
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == snapshot
    stale = run / ".checkpoint.pt.99999.tmp"
    stale.write_bytes(b"left by a killed process")
    assert invoke("eval", run, "eval.lengths=[32]", "eval.variants=false").exit_code == 0
    assert not stale.exists()


def test_a_signal_during_eval_stops_it_like_train(smoke_args, tmp_path, stop_flag):
    clear_stop()
    assert invoke("train", "scheme=nope", *smoke_args, "--no-progress").exit_code == 0
    run = runs_of(tmp_path / "results")[0]
    before = (run / "eval.csv").read_bytes()
    request_stop()
    r = invoke("eval", run, "eval.lengths=[16,32]")
    assert r.exit_code == 3 and "stopped before evaluating at length 16 (on a signal)" in r.output
    assert (run / "eval.csv").read_bytes() == before


def test_a_corrupt_run_directory_is_reported_and_never_blocks_a_sweep(smoke_args, tmp_path):
    assert invoke("train", "scheme=nope", *smoke_args, "--no-progress").exit_code == 0
    run = runs_of(tmp_path / "results")[0]
    (run / "meta.json").write_text('{"status": "do')
    r = invoke("sweep", "scheme=nope,alibi", "seed=0", *smoke_args, "--dry-run")
    assert r.exit_code == 0 and "unreadable (left out)" in r.output and "1 to train" in r.output
    r = invoke("sweep", "scheme=nope,alibi", "seed=0", *smoke_args, "--no-progress")
    assert r.exit_code == 1 and "1 trained" in r.output and "1 failed" in r.output
    assert "corrupt" in r.output and "unreadable" in r.output  # its row in the summary, with the reason
    r = invoke("eval", run)
    assert r.exit_code == 2 and "meta.json is unreadable" in " ".join(r.output.split())


# Is the gap real? ---------------------------------------------------------------------------------------------------
def _synthetic(shift: float, seeds=(0,), windows=400, seed=0):
    """Eval rows plus per-window losses of schemes A and B on the same windows: B = A + shift nats/token + noise."""
    from pe_bench.report import Collected

    rng = np.random.default_rng(seed)
    rows, win = [], {}
    for s in seeds:
        difficulty = rng.gamma(4.0, 0.5, windows)  # shared by A and B: what pairing cancels
        tokens = np.full(windows, 64.0)
        for name, extra in (("A", 0.0), ("B", shift)):
            nll = (difficulty + extra + rng.normal(0, 0.02, windows)) * tokens
            run = f"{name}-{s}"
            rows.append({"run": run, "scheme": name, "label": name, "L_train": 64, "L_eval": 64,
                         "mode": "nonoverlapping", "split": "validation", "stride": 64, "S": "", "budget": "4096",
                         "step": 10, "steps": 10, "seed": s, "status": "ok", "tokens_scored": int(tokens.sum()),
                         "ppl": float(np.exp(nll.sum() / tokens.sum())), "config": name, "group": "g"})
            win[(run, name, "validation", "64", "nonoverlapping", "64", "", "4096", "10", "", "0",
                 str(int(tokens.sum())))] = (nll, tokens)
    return Collected(pd.DataFrame(rows), win)


@pytest.mark.parametrize("seeds", [(0,), (0, 1, 2)])
def test_compare_finds_a_real_gap_and_not_a_null_one(seeds):
    from pe_bench.report import compare, comparison

    real = compare(_synthetic(0.03, seeds), "A", "B", modes=["nonoverlapping"])
    assert real["excludes 0"].tolist() == ["yes"] and real["verdict"].tolist() == ["A lower"]
    assert real["method"].iloc[0].startswith("t, 3 seeds" if len(seeds) > 1 else "paired block bootstrap, 400 windows")
    null = compare(_synthetic(0.0, seeds), "A", "B", modes=["nonoverlapping"])
    assert null["excludes 0"].tolist() == ["no"] and null["verdict"].tolist() == ["not distinguishable"]
    t = comparison(_synthetic(0.0, seeds), "nonoverlapping")
    assert t.attrs["best"] == set()  # no separated best: no mark
    t = comparison(_synthetic(0.03, seeds), "nonoverlapping")
    assert t.attrs["best"] == {("A", 64, 64)}
    interval = t.loc[("A", 64), "interval"]
    assert interval == ("t on log, 3 seeds" if len(seeds) > 1 else "block bootstrap, windows")


# 7 ------------------------------------------------------------------------------------------------------------------
def test_a_run_is_never_resumed_or_evaluated_on_other_data_than_it_was_trained_on(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"line {i} of the first corpus, with some words in it\n" for i in range(3000)))
    args = ["scheme=nope", "data=local", f"data.path={corpus}", "train=smoke", "eval=smoke", "model.n_layers=1",
            "model.d_model=32", f"results_dir={tmp_path / 'res'}"]
    assert invoke("train", *args, "--no-progress").exit_code == 0
    run = runs_of(tmp_path / "res")[0]
    request_stop()  # seed 1: stopped after its first step, to be resumed
    try:
        assert invoke("train", *args, "seed=1", "--no-progress").exit_code == 3
    finally:
        clear_stop()
    (stopped,) = (p for p in runs_of(tmp_path / "res") if p != run)
    checkpoint = (stopped / "checkpoint.pt").read_bytes()
    corpus.write_text(corpus.read_text().replace("first", "other"))  # same size, new contents
    r = invoke("eval", run, "eval.max_tokens=1024")
    assert r.exit_code == 2 and "was trained on other data" in " ".join(r.output.split())
    assert json.loads((run / "meta.json").read_text())["data_fingerprint"]
    r = invoke("train", *args, "seed=1", "--no-progress")  # resuming: refused the same way
    assert r.exit_code == 2 and "was trained on other data" in " ".join(r.output.split()), r.output
    assert (stopped / "checkpoint.pt").read_bytes() == checkpoint


def test_two_configurations_never_share_a_row_even_with_the_same_label(smoke_args, tmp_path):
    # rope evaluated as rope+yarn×8 (an eval-time variant) and rope TRAINED with YaRN×8 have the same label
    args = [*smoke_args, "seed=0", "eval.variants=true", "--no-progress"]
    assert invoke("train", "scheme=rope", "scheme.eval_variants=[{scaling:{type:yarn,factor:8}}]", *args).exit_code == 0
    assert invoke("train", "scheme=rope", "scheme.scaling.type=yarn", "scheme.scaling.factor=8",
                  "scheme.eval_variants=[]", *args).exit_code == 0
    r = invoke("report", tmp_path / "results", "--out", tmp_path / "rep", "--no-plots", "--mode", "nonoverlapping")
    assert r.exit_code == 0, r.output
    t = pd.read_csv(tmp_path / "rep" / "comparison.csv")
    assert (t["seeds"] == 1).all() and len(t) == 3
    yarn = sorted(x for x in t["scheme"] if x.startswith("rope+yarn×8"))
    assert yarn == ["rope+yarn×8 · trained with scheme.scaling.factor=1.0, scheme.scaling.type=none",
                    "rope+yarn×8 · trained with scheme.scaling.factor=8, scheme.scaling.type=yarn"], yarn


def test_a_variant_that_changes_the_trained_model_is_refused_before_anything_runs(smoke_args, tmp_path):
    r = invoke("sweep", "scheme=rope", "seed=0", "scheme.eval_variants=[{base:500}]", *smoke_args, "--no-progress")
    assert r.exit_code == 2 and "scheme.eval_variants[0] changes base, which rope fixes at training" in r.output
    assert not (tmp_path / "results" / "runs").exists()


def test_a_finished_run_without_its_checkpoint_is_never_trained_again(smoke_args, tmp_path):
    assert invoke("train", "scheme=nope", *smoke_args, "--no-progress").exit_code == 0
    run = runs_of(tmp_path / "results")[0]
    (run / "checkpoint.pt").unlink()  # to save disk space
    train_csv = (run / "train.csv").read_bytes()
    assert invoke("train", "scheme=nope", *smoke_args, "--no-progress").exit_code == 0  # nothing missing: done
    r = invoke("train", "scheme=nope", "eval.max_tokens=1024", *smoke_args, "--no-progress")
    assert r.exit_code == 2 and "checkpoint.pt is missing" in " ".join(r.output.split())
    assert (run / "train.csv").read_bytes() == train_csv and not (run / "checkpoint.pt").exists()
    r = invoke("sweep", "scheme=nope", "seed=0", *smoke_args, "--dry-run")
    assert "finished (skipped)" in r.output


def test_runs_made_with_other_numerics_are_never_one_row(smoke_args, tmp_path):
    """Two machines (here: two CPU thread counts) give slightly different numbers for one configuration; a report
    over both folders keeps them apart and says why, instead of averaging them as seed replicas."""
    import torch

    threads = torch.get_num_threads()
    common = ["scheme=nope", "train=smoke", "eval=smoke", "model.n_layers=1", "model.d_model=32", "eval.variants=false",
              "--no-progress"]
    try:
        assert invoke("train", *common, "seed=0", "train.threads=1", f"results_dir={tmp_path / 'a'}").exit_code == 0
        assert invoke("train", *common, "seed=1", "train.threads=2", f"results_dir={tmp_path / 'b'}").exit_code == 0
    finally:
        torch.set_num_threads(threads)
    r = invoke("report", tmp_path / "a", tmp_path / "b", "--out", tmp_path / "rep", "--no-plots", "--mode",
               "nonoverlapping")
    assert r.exit_code == 0, r.output
    t = pd.read_csv(tmp_path / "rep" / "comparison.csv")
    v, isa = torch.__version__, torch.backends.cpu.get_cpu_capability()
    assert sorted(t["scheme"]) == [f"nope · numerics=torch {v}, cpu {isa}, 1 threads",
                                   f"nope · numerics=torch {v}, cpu {isa}, 2 threads"]
    assert (t["seeds"] == 1).all()
    # one folder alone (one kind of numerics): labels and config hashes as before
    r = invoke("report", tmp_path / "a", "--out", tmp_path / "rep1", "--no-plots", "--mode", "nonoverlapping")
    assert list(pd.read_csv(tmp_path / "rep1" / "comparison.csv")["scheme"]) == ["nope"]


def test_a_run_is_never_resumed_with_other_numerics(smoke_args, tmp_path):
    """Started with 1 CPU thread, interrupted, then resumed with 2: refused with one line naming the fix; resumed
    with the thread count it started with, it finishes."""
    import torch

    threads = torch.get_num_threads()
    args = ["scheme=nope", *smoke_args, "--no-progress"]
    try:
        request_stop()  # training stops after its first step with a checkpoint
        try:
            assert invoke("train", *args, "train.threads=1").exit_code == 3
        finally:
            clear_stop()
        run = runs_of(tmp_path / "results")[0]
        r = invoke("train", *args, "train.threads=2")
        assert r.exit_code == 2, r.output
        text = " ".join(r.output.split())
        assert ", 1 threads; resuming it here (torch" in text and "2 threads) would mix two kinds of numbers in one " \
            "run: pass train.threads=1" in text
        assert json.loads((run / "meta.json").read_text())["status"] == "interrupted"
        r = invoke("train", *args, "train.threads=1")
        assert r.exit_code == 0, r.output
        assert json.loads((run / "meta.json").read_text())["resumed_from"] == [1]
    finally:
        torch.set_num_threads(threads)


# A run is evaluated and resumed as what it is (docs/trust.md, "Numbers you can trust") ----------------------------
TINY = ["train=smoke", "eval=smoke", "model.n_layers=1", "model.d_model=32"]


def stopped_after_one_step(results, *args):
    """A run stopped after its first step with a checkpoint (what SIGTERM does): its directory."""
    before = set((results / "runs").iterdir()) if (results / "runs").exists() else set()
    request_stop()
    try:
        r = invoke("train", *TINY, *args, f"results_dir={results}", "--no-progress")
    finally:
        clear_stop()
    assert r.exit_code == 3, r.output
    (run,) = set((results / "runs").iterdir()) - before
    return run


def test_an_edited_config_yaml_is_refused_for_eval_and_for_resuming(tmp_path):
    """config.yaml edited by hand (another learning rate: another trained model) in an interrupted run: `pe-bench
    eval --partial` and resuming with the run's own command are both one line, exit 2, and neither touches the
    run — the edit is not silently overwritten, the checkpoint is not trained on."""
    results = tmp_path / "results"
    run = stopped_after_one_step(results, "scheme=nope")
    text = (run / "config.yaml").read_text()
    assert "\n  lr: 0.003\n" in text
    (run / "config.yaml").write_text(text.replace("\n  lr: 0.003\n", "\n  lr: 0.001\n"))
    edited, checkpoint = (run / "config.yaml").read_bytes(), (run / "checkpoint.pt").read_bytes()
    r = invoke("eval", run, "--partial")
    assert r.exit_code == 2 and "config.yaml does not match its run directory's name" in " ".join(r.output.split())
    assert not (run / "eval.csv").exists()
    r = invoke("train", *TINY, "scheme=nope", f"results_dir={results}", "--no-progress")
    assert r.exit_code == 2, r.output
    assert "config.yaml does not match its run directory's name" in " ".join(r.output.split())
    assert r.output.strip().count("\n") == 0, r.output
    assert (run / "config.yaml").read_bytes() == edited and (run / "checkpoint.pt").read_bytes() == checkpoint
    assert json.loads((run / "meta.json").read_text())["status"] == "interrupted"


def test_a_checkpoint_from_another_run_is_refused_on_resume(tmp_path):
    """Two interrupted runs; nope's checkpoint replaced by alibi's (same tensor shapes: it would load): resuming nope
    is one line, exit 2, and trains nothing."""
    results = tmp_path / "results"
    nope = stopped_after_one_step(results, "scheme=nope")
    alibi = stopped_after_one_step(results, "scheme=alibi")
    shutil.copy(alibi / "checkpoint.pt", nope / "checkpoint.pt")
    foreign = (nope / "checkpoint.pt").read_bytes()
    r = invoke("train", *TINY, "scheme=nope", f"results_dir={results}", "--no-progress")
    assert r.exit_code == 2, r.output
    assert "checkpoint.pt belongs to another configuration" in " ".join(r.output.split())
    assert (nope / "checkpoint.pt").read_bytes() == foreign and not (nope / "train.csv").exists()  # no step trained


def _every_file(directory):
    """Every entry under ``directory`` (hidden ones too): a file's bytes, None for a folder."""
    return {p.relative_to(directory).as_posix(): p.read_bytes() if p.is_file() else None
            for p in sorted(directory.rglob("*"))}


def _foreign_checkpoint(results, tmp_path):
    """nope's checkpoint replaced by alibi's (same tensor shapes: it would load)."""
    nope = stopped_after_one_step(results, "scheme=nope")
    shutil.copy(stopped_after_one_step(results, "scheme=alibi") / "checkpoint.pt", nope / "checkpoint.pt")
    return nope, ["scheme=nope"], "checkpoint.pt belongs to another configuration"


def _changed_data(results, tmp_path):
    """The local corpus behind the config rewritten (same size, new contents) after the checkpoint was written."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"line {i} of the first corpus, with some words in it\n" for i in range(3000)))
    args = ["scheme=nope", "data=local", f"data.path={corpus}"]
    run = stopped_after_one_step(results, *args)
    corpus.write_text(corpus.read_text().replace("first", "other"))
    return run, args, "was trained on other data"


@pytest.mark.parametrize("refusal", [_foreign_checkpoint, _changed_data], ids=["foreign_checkpoint", "changed_data"])
def test_a_refused_resume_leaves_the_run_directory_byte_for_byte_as_it_was(refusal, tmp_path):
    """Resuming is refused (one line, exit 2) before anything in the run directory is written: config.yaml,
    meta.json (its status, its data_fingerprint), the checkpoint and every other file keep their bytes, and no file
    is added — like the refusal for other numerics (test_a_run_is_never_resumed_with_other_numerics)."""
    results = tmp_path / "results"
    run, args, problem = refusal(results, tmp_path)
    before = _every_file(run)
    assert json.loads(before["meta.json"])["status"] == "interrupted"
    r = invoke("train", *TINY, *args, f"results_dir={results}", "--no-progress")
    assert r.exit_code == 2, r.output
    *before_it, line = r.output.strip().splitlines()  # before it: at most the data library re-reading the file
    assert line.startswith("error: ") and problem in line and not any("error" in x for x in before_it), r.output
    after = _every_file(run)
    assert after.keys() == before.keys(), sorted(after.keys() ^ before.keys())
    meta = {k: [json.loads(m["meta.json"]).get(k) for m in (before, after)] for k in ("status", "data_fingerprint")}
    assert [name for name in before if after[name] != before[name]] == [], meta


def test_a_diverged_runs_rows_say_diverged_for_the_base_scheme_and_every_eval_time_variant(tmp_path):
    """A diverged rope run (never evaluated): the report's rows for rope and for each of its eval-time variants
    (configs/scheme/rope.yaml eval_variants) say 'diverged' at every length, in both modes."""
    import yaml

    from pe_bench.config import compose, config_dir
    from pe_bench.report import collect_all, comparison

    cfg = compose(["scheme=rope", *TINY, "eval.variants=true", f"results_dir={tmp_path}"])
    run = Run.for_config(cfg)
    run.create(cfg)
    run.update_meta(status="running")  # a status is reached through running
    run.update_meta(status="diverged", diverged_step=3, diverged_what="loss", diverged_value="nan")
    variants = yaml.safe_load((config_dir() / "scheme" / "rope.yaml").read_text())["eval_variants"]
    assert len(variants) >= 2
    col = collect_all([run])
    assert col.left_out == [] and col.df["scheme"].nunique() == 1 + len(variants)
    for mode in ("nonoverlapping", "sliding"):
        t = comparison(col, mode)
        assert len(t) == 1 + len(variants)
        cells = t[["32", "64", "128", "256", "longest/L"]]
        assert (cells == "diverged").all().all(), t


def test_a_cell_with_a_diverged_replica_says_diverged_never_the_mean_of_the_others():
    from pe_bench.report import comparison

    df = pd.DataFrame([{"scheme": "x", "L_train": 64, "L_eval": n, "mode": "nonoverlapping", "split": "validation",
                        "stride": n, "ppl": ppl, "seed": s, "status": st, "tokens_scored": 10}
                       for n in (64, 128)
                       for s, ppl, st in ((0, 5.0, "ok"), (1, 6.0, "ok"), (2, float("nan"), "diverged"))])
    t = comparison(df, "nonoverlapping")
    assert t.loc[("x", 64)].tolist()[:4] == ["diverged", "diverged", "diverged", 3]


def test_rows_of_another_precision_sit_beside_the_others_and_never_replace_them(tmp_path):
    """The same weights evaluated in fp32 and in bf16 (what a CPU and a GPU give): eval.csv keeps both sets of rows,
    the fp32 ones untouched, and the report keeps them in rows of their own (· fp32, · bf16)."""
    import copy

    from pe_bench.experiment import evaluate_run, run_one
    from pe_bench.report import collect_all, comparison

    cfg = compose_tiny(tmp_path, "scheme=alibi", "eval.lengths=[32,64]", "eval.modes=[nonoverlapping]",
                       "eval.variants=false")
    run = run_one(cfg, progress=False)
    fp32 = pd.read_csv(run.eval_csv)
    assert set(fp32["precision"]) == {"fp32"} and len(fp32) == 2
    bf16 = copy.deepcopy(cfg)
    bf16.train.precision = "bf16"
    evaluate_run(run, bf16, trained=cfg, progress=False)
    both = pd.read_csv(run.eval_csv)
    assert len(both) == 4 and sorted(both["precision"]) == ["bf16", "bf16", "fp32", "fp32"]
    assert both.merge(fp32).shape[0] == 2  # the fp32 rows, as they were
    t = comparison(collect_all([run]), "nonoverlapping")
    assert sorted(t.index.get_level_values(0)) == ["alibi · bf16", "alibi · fp32"] and (t["seeds"] == 1).all()


def compose_tiny(tmp_path, *overrides):
    from pe_bench.config import compose

    return compose([*TINY, f"results_dir={tmp_path / 'results'}", *overrides])


def test_a_finished_run_is_not_trained_again_on_a_machine_with_other_numerics(tmp_path):
    """A second machine (here: another CPU thread count) sharing the results directory: `pe-bench train` of a run
    finished elsewhere trains nothing and rewrites nothing — the run keeps the numerics it was made with."""
    import torch

    threads = torch.get_num_threads()
    args = ["scheme=nope", *TINY, f"results_dir={tmp_path / 'results'}", "--no-progress"]
    try:
        assert invoke("train", *args, "train.threads=1").exit_code == 0
        run = runs_of(tmp_path / "results")[0]
        before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file() and p.name != ".lock"}
        r = invoke("train", *args, "train.threads=2")
        assert r.exit_code == 0, r.output
    finally:
        torch.set_num_threads(threads)
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file() and p.name != ".lock"} == before
    assert json.loads((run / "meta.json").read_text())["numerics"].endswith(", 1 threads")


def test_eval_accepts_only_the_schemes_declared_eval_time_options():
    """`pe-bench eval` may change eval.* and Scheme.eval_options — RoPE's scaling, learned's beyond_table and
    extend_seed, NoPE's head_scale, nothing of any other registered scheme — and refuses any other scheme option or another scheme."""
    from pe_bench import schemes
    from pe_bench.config import ConfigError, compose
    from pe_bench.experiment import check_eval_overrides

    declared = {name: tuple(cls.eval_options) for name, cls in schemes.REGISTRY.items() if cls.eval_options}
    assert declared == {"rope": ("scaling",), "learned": ("beyond_table", "extend_seed"), "nope": ("head_scale",)}
    accepted = [("rope", ["scheme.scaling.type=yarn", "scheme.scaling.factor=8"]), ("nope", ["scheme.head_scale=1.5"]),
                ("learned", ["scheme.beyond_table=extend", "scheme.extend_seed=7"])]
    for name, options in accepted:
        check_eval_overrides(compose([f"scheme={name}"]), compose([f"scheme={name}", *options]))
    refused = [("rope", ["scheme.base=500"], "scheme.base is fixed at training for rope"),
               ("learned", ["scheme.init_std=0.5"], "scheme.init_std is fixed at training for learned"),
               ("alibi", ["scheme.learned_slopes=true"], "eval-time options of alibi: none"),
               ("rope", ["scheme=alibi"], "this run was trained with rope")]
    for name, options, says in refused:
        with pytest.raises(ConfigError, match=says):
            check_eval_overrides(compose([f"scheme={name}"]), compose([f"scheme={name}", *options]))


def test_compare_leaves_out_and_names_the_seeds_that_are_not_finite():
    """Seeds 0-2 on both sides, B's seed 2 not finite: the paired difference is over seeds 0 and 1 (t, 2 seeds) and
    names seed 2 as left out, never a number from it."""
    from pe_bench.report import compare

    col = _synthetic(0.03, (0, 1, 2))
    bad = (col.df["scheme"] == "B") & (col.df["seed"] == 2)
    col.df.loc[bad, ["status", "ppl"]] = ["nonfinite", float("nan")]
    t = compare(col, "A", "B", modes=["nonoverlapping"])
    assert t["seeds left out"].tolist() == ["2"] and t["method"].tolist() == ["t, 2 seeds"]
    ok = col.df[col.df["seed"] < 2]
    assert t["ppl B"].iloc[0] == round(float(ok[ok["scheme"] == "B"]["ppl"].mean()), 3)
