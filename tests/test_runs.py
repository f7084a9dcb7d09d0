"""Run directories as the "Run directories" section of docs/evaluation.md lists them: the files, their columns, what
meta.json and the checkpoint record, config.yaml written once, files replaced whole, and the lock held while a process
trains or evaluates the run."""

import errno
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml
from typer.testing import CliRunner

from pe_bench.cli import app
from pe_bench.config import compose
from pe_bench.runs import Run, RunFileError, digest, file_sha256, identity, run_dir_for, write_csv

runner = CliRunner()
TINY = ["scheme=nope", "train=smoke", "eval=smoke", "model.n_layers=1", "model.d_model=32"]

# The lists of docs/evaluation.md, word for word ("Run directories")
TRAIN_CSV = ["step", "loss", "lr", "tokens_per_s", "val_loss", "elapsed_s"]
EVAL_CSV = ["scheme", "base_scheme", "model", "data", "split", "L_train", "L_eval", "ratio", "mode", "stride", "loss",
            "ppl", "bpb", "tokens_scored", "seed", "status", "note", "S", "budget", "step", "precision", "warmup"]
META_JSON = {"pe_bench", "git_sha", "git_modified", "torch", "python", "device", "numerics", "processes", "status", "error",
             "checkpoint_step", "wall_seconds", "train_seconds", "eval_seconds", "train_tokens_per_s", "n_params",
             "data_fingerprint", "eval_csv_sha256", "attention_backend", "eval_attention_backend"}


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """One finished tiny run (smoke recipe: 20 steps, logged every 5, validated every 10)."""
    results = tmp_path_factory.mktemp("runs") / "results"
    r = invoke("train", *TINY, f"results_dir={results}", "--no-progress")
    assert r.exit_code == 0, r.output
    (run,) = (results / "runs").iterdir()
    return run


@pytest.fixture
def run(finished, tmp_path):
    """A private copy of the finished run."""
    return Path(shutil.copytree(finished, tmp_path / "results" / "runs" / finished.name))


def test_a_run_directory_holds_the_documented_files_with_the_documented_columns(finished):
    assert {p.name for p in finished.iterdir()} == {"config.yaml", "train.csv", "eval.csv", "windows.csv",
                                                  "positions.csv", "context.csv", "meta.json", "checkpoint.pt",
                                                  ".lock"}
    train = pd.read_csv(finished / "train.csv", keep_default_na=False)
    assert list(train.columns) == TRAIN_CSV
    assert list(train["step"]) == [5, 10, 15, 20]
    assert [v != "" for v in train["val_loss"]] == [False, True, False, True]  # at L, every train.val_interval steps
    ev = pd.read_csv(finished / "eval.csv", keep_default_na=False)
    assert list(ev.columns) == EVAL_CSV
    assert set(ev["precision"]) == {"fp32"} and set(ev["step"]) == {20} and set(ev["status"]) == {"ok"}
    assert set(ev[ev["mode"] == "sliding"]["S"]) == {"8"} and set(ev[ev["mode"] == "nonoverlapping"]["S"]) == {""}
    assert set(ev[ev["mode"] == "nonoverlapping"]["budget"]) == {2048}  # eval.max_tokens
    assert set(ev[ev["mode"] == "sliding"]["budget"]) == {512}  # eval.sliding_max_tokens
    # windows.csv: per evaluation window its summed nll and scored tokens, recomputing every eval.csv row
    win = pd.read_csv(finished / "windows.csv", keep_default_na=False)
    assert {"window", "nll", "tokens"} <= set(win.columns)
    for r in ev.itertuples():
        w = win[(win["scheme"] == r.scheme) & (win["L_eval"] == r.L_eval) & (win["mode"] == r.mode)]
        assert w["tokens"].sum() == r.tokens_scored
        assert w["nll"].sum() / w["tokens"].sum() == pytest.approx(r.loss, abs=1e-5)
    assert len(pd.read_csv(finished / "positions.csv"))  # per-position loss curves
    # context.csv: per length past L and position range, its loss against [L/2, L) of the L windows, with an interval
    ctx = pd.read_csv(finished / "context.csv")
    assert set(ctx["L_eval"]) == {64, 128, 256} and (ctx["lo"] <= ctx["gain"]).all() and (ctx["gain"] <= ctx["hi"]).all()
    assert (ctx["gain"] == (ctx["loss"] - ctx["ref_loss"]).round(6)).all() or \
        ((ctx["gain"] - (ctx["loss"] - ctx["ref_loss"])).abs() < 2e-6).all()


def test_meta_json_records_what_the_numbers_depend_on_and_how_the_run_went(finished):
    meta = json.loads((finished / "meta.json").read_text())
    assert META_JSON <= set(meta), META_JSON - set(meta)
    assert meta["status"] == "done" and meta["error"] is None and meta["processes"] == 1
    assert meta["checkpoint_step"] == 20 and meta["n_params"] > 0 and meta["train_tokens_per_s"] > 0
    assert meta["eval_csv_sha256"] == file_sha256(finished / "eval.csv")


def test_a_checkpoint_carries_its_runs_identity_and_the_fingerprint_of_its_data(finished):
    ckpt = torch.load(finished / "checkpoint.pt", weights_only=False)
    assert {"model", "optimizer", "step", "config", "identity", "data"} <= set(ckpt)
    assert ckpt["step"] == 20
    cfg = Run(finished).load_config()
    assert ckpt["identity"] == digest(identity(cfg)) == finished.name.rsplit("-", 1)[1]  # the run-name hash
    assert ckpt["data"] == json.loads((finished / "meta.json").read_text())["data_fingerprint"]
    assert run_dir_for(cfg).name == finished.name


def test_config_yaml_is_written_once_and_never_rewritten_by_evaluation(run):
    """`pe-bench eval` with another length, stride, token budget and the log-n option: rows are added, config.yaml
    keeps its bytes (and its inode: not even replaced by the same text)."""
    before, inode = (run / "config.yaml").read_bytes(), (run / "config.yaml").stat().st_ino
    rows = len(pd.read_csv(run / "eval.csv"))
    r = invoke("eval", run, "eval.lengths=[64]", "eval.logn=true", "eval.stride=16", "eval.max_tokens=1024")
    assert r.exit_code == 0, r.output
    assert len(pd.read_csv(run / "eval.csv")) > rows
    assert (run / "config.yaml").read_bytes() == before and (run / "config.yaml").stat().st_ino == inode


def test_a_runs_config_is_what_its_file_says_now_and_a_copy_the_caller_may_change(run, monkeypatch):
    """Run.load_config parses config.yaml once per text: a second call gives an equal, separate Config without
    parsing again; an edited file (or a stickbreaking config without the later ``remainder``) is read anew."""
    from pe_bench.config import from_yaml_text
    from pe_bench.runs import directory

    r = Run(run)
    parsed = []
    monkeypatch.setattr(directory, "from_yaml_text", lambda text: parsed.append(text) or from_yaml_text(text))
    first = r.load_config()
    first.model.n_layers = 7
    assert r.load_config().model.n_layers == 1 and len(parsed) == 1
    assert r.legacy_options() == {} and r.legacy_options() == {}
    text = (run / "config.yaml").read_text()
    (run / "config.yaml").write_text(text.replace("n_layers: 1", "n_layers: 3"))
    assert r.load_config().model.n_layers == 3 and len(parsed) == 2
    raw = yaml.safe_load(text)
    raw["scheme"] = {k: v for k, v in compose(["scheme=stickbreaking"]).scheme.items() if k != "remainder"}
    (run / "config.yaml").write_text(yaml.safe_dump(raw))
    assert r.legacy_options() == {"remainder": False}
    got = r.legacy_options()
    got["remainder"] = True
    assert r.legacy_options() == {"remainder": False}
    (run / "config.yaml").write_text("scheme: [unclosed\n")
    with pytest.raises(RunFileError, match="config.yaml is unreadable"):
        r.legacy_options()


def test_a_failed_write_leaves_the_previous_file_whole_and_no_temporary_file(tmp_path, monkeypatch):
    """Files are written to a temporary name and renamed: a write that fails half-way (a full disk) leaves the old
    file as it was, no temporary file beside it, and an error naming the file."""
    path = tmp_path / "eval.csv"
    write_csv(path, [{"a": 1, "b": 2}], ["a", "b"])
    before = path.read_bytes()
    real = Path.write_text

    def full(self, text, *args, **kwargs):
        real(self, text[: len(text) // 2], *args, **kwargs)  # half of it reached the disk
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(OSError) as e:
        write_csv(path, [{"a": 3, "b": 4}] * 100, ["a", "b"])
    assert e.value.errno == errno.ENOSPC and e.value.filename == str(path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["eval.csv"]


def test_the_run_lock_is_held_while_a_process_trains_and_while_it_evaluates(run, tmp_path, monkeypatch):
    """Seen from outside (another open file, as another process would): .lock is held during training and during
    `pe-bench eval`, and free again after each."""
    from pe_bench import experiment
    from pe_bench import train as train_mod

    seen = {"train": [], "eval": []}
    real_batch, real_evaluate = train_mod.random_batch, experiment.evaluate

    def batch(*args, **kwargs):
        seen["train"].append(Run(here["run"]).is_locked())
        return real_batch(*args, **kwargs)

    def evaluate(*args, **kwargs):
        seen["eval"].append(Run(here["run"]).is_locked())
        return real_evaluate(*args, **kwargs)

    monkeypatch.setattr(train_mod, "random_batch", batch)
    monkeypatch.setattr(experiment, "evaluate", evaluate)
    results = tmp_path / "fresh"
    here = {"run": run_dir_for(compose([*TINY, "train.steps=2", f"results_dir={results}"]))}
    r = invoke("train", *TINY, "train.steps=2", "eval.lengths=[32]", "eval.modes=[nonoverlapping]",
               f"results_dir={results}", "--no-progress")
    assert r.exit_code == 0, r.output
    assert seen["train"] and all(seen["train"]) and seen["eval"] and all(seen["eval"])
    assert not Run(here["run"]).is_locked()
    seen["eval"].clear()
    here["run"] = run
    r = invoke("eval", run, "eval.lengths=[64]", "eval.modes=[nonoverlapping]")
    assert r.exit_code == 0, r.output
    assert seen["eval"] and all(seen["eval"])
    assert not Run(run).is_locked()


def test_git_modified_says_whether_the_checkout_differs_from_its_commit(tmp_path):
    """meta.json's git_modified: a run made from modified code (pe_bench/, configs/) names a commit it does not
    match; results and untracked files are not the code."""
    import subprocess

    from pe_bench.runs import git_modified, git_sha

    assert git_modified(tmp_path) is None and git_sha(tmp_path) is None  # not a checkout
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (tmp_path / "pe_bench").mkdir()
    (tmp_path / "results").mkdir()
    for f in ("pe_bench/a.py", "results/meta.json"):
        (tmp_path / f).write_text("1\n")
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "a"], check=True)
    (tmp_path / "pe_bench" / "new.py").write_text("untracked files are not the code that ran\n")
    (tmp_path / "results" / "meta.json").write_text("2\n")  # results are tracked, and rewritten by runs
    assert git_modified(tmp_path) is False and len(git_sha(tmp_path)) == 40
    (tmp_path / "pe_bench" / "a.py").write_text("2\n")
    assert git_modified(tmp_path) is True


@pytest.mark.parametrize("caps, suffix", [({}, ""), ({"ATEN_CPU_CAPABILITY": "avx2"}, " (MKL, oneDNN not capped)"),
                                          ({"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
                                           " (MKL, oneDNN not capped)"),
                                          ({"ATEN_CPU_CAPABILITY": "avx2", "MKL_ENABLE_INSTRUCTIONS": "AVX2",
                                            "ONEDNN_MAX_CPU_ISA": "AVX2"}, "")])
def test_numerics_name_torch_kernels_capped_without_mkl_and_onednn(monkeypatch, caps, suffix):
    """ATEN_CPU_CAPABILITY alone leaves MKL's and oneDNN's products at the CPU's widest instruction set: other
    numbers than a CPU of that set, so the numerics say so and such runs never pool with that CPU's."""
    from pe_bench.runs import numerics

    for k in ("ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS", "ONEDNN_MAX_CPU_ISA"):
        monkeypatch.delenv(k, raising=False)
    for k, v in caps.items():
        monkeypatch.setenv(k, v)
    isa = torch.backends.cpu.get_cpu_capability()
    assert numerics(torch.device("cpu")) == f"torch {torch.__version__}, cpu {isa}{suffix}, {torch.get_num_threads()} threads"


def test_a_done_run_whose_rows_are_gone_is_evaluated_again_never_retrained(tmp_path):
    """eval.csv deleted from a finished run: train and eval add its rows again from the checkpoint; with the
    checkpoint gone too, one line says the weights are gone."""
    args = [*TINY, f"results_dir={tmp_path}", "--no-progress"]
    assert runner.invoke(app, ["train", *args]).exit_code == 0
    [run] = (tmp_path / "runs").iterdir()
    rows = (run / "eval.csv").read_text()
    trained = (run / "train.csv").read_text()
    for command in (["train", *args], ["eval", str(run), "--no-progress"]):
        (run / "eval.csv").unlink()
        r = runner.invoke(app, command)
        assert r.exit_code == 0, (command, r.output)
        assert (run / "eval.csv").read_text() == rows and (run / "train.csv").read_text() == trained
    (run / "eval.csv").unlink()
    (run / "checkpoint.pt").unlink()
    r = runner.invoke(app, ["train", *args])
    assert r.exit_code == 2 and "checkpoint.pt is missing" in r.output and "cannot become" not in r.output


def test_a_task_run_evaluated_on_the_development_examples_only_is_evaluated_on_the_test_examples_later(tmp_path):
    args = ["task=passkey", "scheme=nope", "train=smoke", "model.n_layers=1", "model.d_model=32",
            "train.steps=5", f"results_dir={tmp_path}", "--no-progress"]
    assert runner.invoke(app, ["train", *args, "eval.heldout=dev"]).exit_code == 0
    [run] = (tmp_path / "runs").iterdir()
    assert (run / "accuracy_dev.csv").exists() and not (run / "accuracy.csv").exists()
    r = runner.invoke(app, ["train", *args])
    assert r.exit_code == 0, r.output
    assert (run / "accuracy.csv").exists()
