"""The command line as a user meets it: train, eval, sweep, schemes, and one-line errors with exit code 2."""

import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from pe_bench import schemes
from pe_bench.cli import app

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, list(args), catch_exceptions=False)


def only_run(results):
    runs = sorted((results / "runs").iterdir())
    assert len(runs) == 1
    return runs[0]


def test_train_writes_a_complete_run_directory(smoke_args, tmp_path):
    r = invoke("train", "scheme=alibi", *smoke_args, "--no-progress")
    assert r.exit_code == 0, r.output
    run = only_run(tmp_path / "results")
    assert run.name.startswith("alibi-tiny-shakespeare-L32-s0-")
    assert {p.name for p in run.iterdir() if not p.name.startswith(".")} == {
        "config.yaml", "train.csv", "eval.csv", "positions.csv", "windows.csv", "context.csv", "meta.json",
        "checkpoint.pt"}
    ev = pd.read_csv(run / "eval.csv")
    assert len(ev) == 8 and set(ev["mode"]) == {"nonoverlapping", "sliding"}
    assert list(ev.columns[:11]) == ["scheme", "base_scheme", "model", "data", "split", "L_train", "L_eval", "ratio",
                                     "mode", "stride", "loss"]
    meta = pd.read_json(run / "meta.json", typ="series")
    assert meta["status"] == "done" and meta["torch"] and meta["train_tokens_per_s"] > 0
    assert "perplexity" in r.output


def test_eval_reevaluates_a_saved_run_without_retraining(smoke_args, tmp_path):
    assert invoke("train", "scheme=learned", *smoke_args, "eval.variants=true", "--no-progress").exit_code == 0
    run = only_run(tmp_path / "results")
    ckpt_mtime = (run / "checkpoint.pt").stat().st_mtime_ns
    ev = pd.read_csv(run / "eval.csv")
    base = ev[ev["scheme"] == "learned"]
    assert set(base[base["status"] == "not_applicable"]["L_eval"]) == {64, 128, 256}  # past the 32-row table
    assert {"learned[beyond_table=clamp]", "learned[beyond_table=extend]"} <= set(ev["scheme"])
    assert (ev[ev["scheme"] != "learned"]["status"] == "ok").all()

    r = invoke("eval", str(run), "eval.lengths=[32,512]", "eval.modes=[nonoverlapping]", "eval.variants=false")
    assert r.exit_code == 0, r.output
    ev2 = pd.read_csv(run / "eval.csv")
    assert 512 in set(ev2["L_eval"]) and len(ev2) == len(ev) + 1  # 32 replaced, 512 added
    assert (run / "checkpoint.pt").stat().st_mtime_ns == ckpt_mtime

    r = invoke("eval", str(run), "eval.split=test", "eval.lengths=[32]", "eval.modes=[nonoverlapping]",
               "eval.variants=false")
    assert r.exit_code == 0, r.output
    ev3 = pd.read_csv(run / "eval.csv")
    assert len(ev3) == len(ev2) + 1 and set(ev3["split"]) == {"validation", "test"}  # test rows sit beside


def test_eval_of_a_saved_run_uses_the_thread_count_it_was_trained_with(smoke_args, tmp_path, monkeypatch):
    """Evaluated again later (e.g. on the test split), a run trained with train.threads=1 is evaluated with one
    thread, as the sweep evaluated it: its numbers are the numerics its meta.json records."""
    import torch

    from pe_bench import experiment

    assert invoke("train", "scheme=nope", *smoke_args, "train.threads=1", "--no-progress").exit_code == 0
    run = only_run(tmp_path / "results")
    seen = []
    real = experiment.evaluate_run
    monkeypatch.setattr(experiment, "evaluate_run", lambda *a, **k: (seen.append(torch.get_num_threads()),
                                                                      real(*a, **k))[1])
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(3)
        r = invoke("eval", str(run), "eval.split=test", "eval.lengths=[32]", "eval.modes=[nonoverlapping]")
    finally:
        torch.set_num_threads(before)
    assert r.exit_code == 0, r.output
    assert seen == [1]


def test_rope_extensions_are_rows_of_their_own_and_can_be_added_at_eval_time(smoke_args, tmp_path):
    assert invoke("train", "scheme=rope", *smoke_args, "eval.variants=true", "--no-progress").exit_code == 0
    run = only_run(tmp_path / "results")
    ev = pd.read_csv(run / "eval.csv")
    extensions = {"rope+linear×8", "rope+ntk×8", "rope+dynamic", "rope+yarn×8", "rope+llama3×8", "rope+rerope",
                  "rope+yarn×8[attention_factor=1.0]", "rope+resonance", "rope+yarn×8+resonance",
                  "rope+self_extend×16", "rope+lm_infinite", "rope+streaming", "rope+dual_chunk"}
    assert set(ev["scheme"]) == {"rope"} | extensions
    assert (ev["status"] == "ok").all() and (ev["base_scheme"] == "rope").all()
    ok = ev[ev["mode"] == "nonoverlapping"].set_index(["scheme", "L_eval"])["ppl"]
    assert ok["rope+dynamic", 32] == ok["rope", 32]  # dynamic NTK leaves lengths <= L untouched
    assert ok["rope+linear×8", 32] != ok["rope", 32]
    assert ok["rope+yarn×8[attention_factor=1.0]", 32] != ok["rope+yarn×8", 32]  # the temperature alone differs

    r = invoke("eval", str(run), "scheme.scaling.type=yarn", "scheme.scaling.factor=4")
    assert r.exit_code == 0, r.output
    ev2 = pd.read_csv(run / "eval.csv")
    assert set(ev2["scheme"]) == set(ev["scheme"]) | {"rope+yarn×4"}  # just the asked-for variant was added
    assert len(ev2) == len(ev) + 8
    assert "rope+yarn×4" in r.output


def test_randomized_positions_train_and_evaluate_within_their_range(smoke_args, tmp_path):
    r = invoke("train", "scheme=learned", "train.random_positions=128", "eval.variants=false", *smoke_args,
               "--no-progress")
    assert r.exit_code == 0, r.output
    run = only_run(tmp_path / "results")
    ev = pd.read_csv(run / "eval.csv")
    assert set(ev[ev["status"] == "ok"]["L_eval"]) == {32, 64, 128}  # the 128-row table covers all of them
    na = ev[ev["status"] == "not_applicable"]
    assert set(na["L_eval"]) == {256} and "raise train.random_positions" in na["note"].iloc[0]


def test_sweep_trains_each_point_then_skips_finished_ones(smoke_args, tmp_path):
    r = invoke("sweep", "scheme=nope,alibi", "seed=0", *smoke_args, "eval.variants=true", "--no-progress")
    assert r.exit_code == 0, r.output
    table = pd.read_csv(tmp_path / "results" / "default" / "comparison.csv")
    uniform = {f"nope[head_scale={x}]" for x in (1.2, 1.5, 1.8)}  # NoPE's eval-time rows (configs/scheme/nope.yaml)
    assert set(table["scheme"]) == {"nope", "alibi", *uniform}
    assert set(table["mode"]) == {"nonoverlapping", "sliding"}
    assert {"32", "64", "128", "256", "longest/L", "seeds"} <= set(table.columns)
    assert "| alibi | 32 |" in (tmp_path / "results" / "default" / "comparison.md").read_text()
    assert {p.name for p in (tmp_path / "results" / "default").iterdir()} == {  # the report, in <results_dir>/<name>
        "README.md", "results.json", "index.html", "comparison.csv", "comparison.md", "eval_long.csv",
        "ppl_vs_length_nonoverlapping.png", "ppl_vs_length_sliding.png", "loss_vs_position.png"}
    alibi_run = next((tmp_path / "results" / "runs").glob("alibi-*"))
    assert invoke("eval", str(alibi_run), "eval.lengths=[512]", "eval.variants=false").exit_code == 0
    again = invoke("sweep", "scheme=nope,alibi", "seed=0", *smoke_args, "eval.variants=true", "--no-progress")
    assert "2 skipped" in again.output and "0 trained" in again.output
    table2 = pd.read_csv(tmp_path / "results" / "default" / "comparison.csv")
    assert "512" not in table2.columns  # an extra evaluation of one run does not leak into the sweep's table
    assert table2.drop(columns=["mode"]).equals(table.drop(columns=["mode"]))


def test_schemes_lists_every_registered_scheme_on_one_line():
    out = invoke("schemes").output.strip().splitlines()
    assert [line.split()[0] for line in out] == schemes.available()


def test_schemes_with_variants_lists_every_eval_time_row_as_its_overrides():
    """`pe-bench schemes --variants`: under each scheme the eval_variants of its YAML, as overrides for `pe-bench
    eval` (RoPE's thirteen training-free rows among them); the scheme lines are those of `pe-bench schemes`."""
    out = invoke("schemes", "--variants").output.strip().splitlines()
    assert [line for line in out if not line.startswith(" ")] == invoke("schemes").output.strip().splitlines()
    rope = out[out.index(next(line for line in out if line.startswith("rope "))) + 1:]
    rope = rope[:next(i for i, line in enumerate(rope) if not line.startswith(" "))]
    assert len(rope) == 13 and "+ scheme.scaling.type=streaming" in [line.strip() for line in rope]
    assert "+ scheme.scaling.resonance=true" in [line.strip() for line in rope]


@pytest.mark.parametrize("args,message", [
    (["scheme=nosuch"], "unknown scheme 'nosuch'; choose one of: alibi"),
    (["model=huge"], "unknown model preset 'huge'; choose one of: base, small, tiny"),
    (["model.n_layer=2"], "unknown config key 'model.n_layer'; valid keys in model: name, n_layers"),
    (["model.n_layers=two"], "bad value for 'model.n_layers'"),
    (["scheme=rope", "scheme.layout=diagonal"], "scheme.layout must be one of half, interleaved"),
    (["scheme=rope", "scheme.bas=1"], "unknown config key 'scheme.bas'"),
    (["eval.modes=[nonoverlapping,strided]"], "eval.modes has ['strided']"),
    (["train.random_positions=10"], "train.random_positions=10 must be 0 (off) or at least train.seq_len=64"),
    (["scheme=rope", "scheme.scaling.type=su"], "scheme.scaling.type must be one of"),
    (["scheme=rope", "scheme.scaling.type=longrope"], "needs scheme.scaling.long_factor"),
    (["scheme=hybrid", "scheme.parts=[{name:sinusoidal},{name:nosuch}]"], "'nosuch' is not a scheme to compose"),
    (["data=local"], "data.source=local needs data.path"),
    (["model.d_model=100", "model.n_heads=3"], "must be divisible by model.n_heads=3"),
])
def test_config_errors_are_one_line_and_exit_2(args, message, tmp_path):
    r = runner.invoke(app, ["train", *args, f"results_dir={tmp_path}"])
    assert r.exit_code == 2, r.output
    assert message in r.output
    assert "Traceback" not in r.output
    assert not (tmp_path / "runs").exists()  # nothing was started


def test_eval_refuses_overrides_that_would_not_match_the_checkpoint(smoke_args, tmp_path):
    assert invoke("train", "scheme=nope", *smoke_args, "--no-progress").exit_code == 0
    run = only_run(tmp_path / "results")
    r = runner.invoke(app, ["eval", str(run), "model.n_layers=4"])
    assert r.exit_code == 2 and "'model.n_layers' cannot be changed here" in r.output
    r = runner.invoke(app, ["eval", str(tmp_path / "nowhere")])
    assert r.exit_code == 2 and "is not a trained run directory" in r.output


def test_too_short_validation_split_fails_before_training(tmp_path):
    path = tmp_path / "small.txt"
    path.write_text("a short corpus line\n" * 3000)  # 60 KB: validation ≈ 3 KB < 4 × 8 × 128
    r = runner.invoke(app, ["train", "data=local", f"data.path={path}", "train.seq_len=128", f"results_dir={tmp_path}"])
    assert r.exit_code == 2 and "the evaluation split has" in r.output and "shorter eval.lengths" in r.output
    assert not (tmp_path / "runs").exists()


def test_console_script_errors_without_traceback(tmp_path):
    exe = [sys.executable, "-m", "pe_bench"]
    p = subprocess.run([*exe, "train", "scheme=nosuch"], capture_output=True, text=True, cwd=tmp_path, check=False)
    assert p.returncode == 2
    assert p.stderr.strip().count("\n") == 0 and "unknown scheme 'nosuch'" in p.stderr


def test_run_names_ignore_bookkeeping_but_not_the_recipe():
    from pe_bench.config import compose
    from pe_bench.runs import run_name

    base = run_name(compose(["scheme=rope"]))
    assert base.startswith("rope-tiny-shakespeare-L64-s0-")
    assert run_name(compose(["scheme=rope", "train.ckpt_interval=7", "eval.lengths=[64]", "results_dir=x"])) == base
    assert run_name(compose(["scheme=rope", "train.lr=1e-3"])) != base
    assert run_name(compose(["scheme=rope", "scheme.base=500000"])) != base


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """One finished tiny run (L = 32), trained once for the tests below that only evaluate it."""
    results = tmp_path_factory.mktemp("trained")
    r = invoke("train", "scheme=alibi", "train=smoke", "train.steps=3", "model.n_layers=2", "model.d_model=32",
               "model.n_heads=2", "train.threads=1", "eval.lengths=[32]", "eval.modes=[nonoverlapping]",
               "eval.variants=false", f"results_dir={results}", "--no-progress")
    assert r.exit_code == 0, r.output
    return only_run(results)


def test_eval_takes_progress_like_train(trained_run):
    r = invoke("eval", str(trained_run), "eval.lengths=[64]", "--no-progress")
    assert r.exit_code == 0, r.output
    assert "64" in set(pd.read_csv(trained_run / "eval.csv", dtype=str)["L_eval"])


@pytest.mark.parametrize("args, says", [
    (["eval", "RUN", "--bogus"], "No such option: --bogus"),
    (["analyze", "RUN", "--examples", "0"], "Invalid value for '--examples'"),
    (["report", "--compare", "rope"], "'--compare' requires 2 arguments"),
    (["train", "--nope"], "No such option: --nope"),
    (["eval"], "Missing argument 'run_dir'"),
    (["nosuchcommand"], "No such command 'nosuchcommand'"),
])
def test_option_errors_are_one_error_line_and_exit_2(args, says):
    r = runner.invoke(app, args)
    assert r.exit_code == 2, r.output
    assert r.output.startswith("error: ") and says in r.output, r.output
    assert r.output.strip().count("\n") == 0, r.output


def test_help_still_shows_help():
    r = invoke()  # no arguments: the help, as before
    assert "Usage" in r.output and "Commands" in r.output and not r.output.startswith("error:"), r.output
    r = invoke("eval", "--help")
    assert r.exit_code == 0 and "--partial" in r.output and "--no-progress" in r.output


def test_eval_of_a_run_training_without_a_checkpoint_yet_is_busy(smoke_args, tmp_path):
    """Exit 4 (busy), as for a run training with a checkpoint, not 'not a trained run directory'."""
    from pe_bench.config import compose
    from pe_bench.runs import Run

    cfg = compose(["scheme=alibi", *smoke_args], scheme=False)
    run = Run.for_config(cfg)
    run.create(cfg)
    run.update_meta(status="running")
    with run.lock():  # the training process holds it
        r = runner.invoke(app, ["eval", str(run.path), "--partial"])
    assert r.exit_code == 4, r.output
    assert "being trained by another process and has no checkpoint yet" in r.output, r.output
    assert r.output.strip().count("\n") == 0


def test_sigterm_stops_an_evaluation_within_its_length(trained_run, tmp_path):
    """A signal during the last length's pass stops it at the next batch of windows (exit 3, nothing written), not
    after the whole length. Waits on the first pass's line, then signals; the timeouts are only a safety net."""
    import signal
    import threading

    before = (trained_run / "eval.csv").read_bytes()
    # L = 256: nonoverlapping (quick, one line), then sliding with stride 1: a window per token of the split
    cmd = [sys.executable, "-m", "pe_bench", "eval", str(trained_run), "eval.lengths=[256]", "eval.stride=1",
           "eval.modes=[nonoverlapping,sliding]", "eval.sliding_max_tokens=1000000", "eval.variants=false"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path)
    watchdog = threading.Timer(300, p.kill)
    watchdog.start()
    try:
        lines = []
        for line in p.stdout:
            lines.append(line)
            if "L=256 nonoverlapping: ppl" in line:
                p.send_signal(signal.SIGTERM)
                break
        rc = p.wait(timeout=120)
        lines += p.stdout.readlines()
    finally:
        watchdog.cancel()
        if p.poll() is None:
            p.kill()
    out = "".join(lines)
    assert rc == 3, out
    assert "L=256 sliding: ppl" not in out and "stopped" in out, out
    assert (trained_run / "eval.csv").read_bytes() == before


def test_an_unexpected_error_is_one_line_exit_1_and_PE_BENCH_DEBUG_shows_its_traceback(monkeypatch, tmp_path):
    from pe_bench.cli import report as report_command

    def crash(paths):
        raise RuntimeError("something unexpected")

    monkeypatch.setattr(report_command, "_find_runs", crash)
    monkeypatch.delenv("PE_BENCH_DEBUG", raising=False)
    r = runner.invoke(app, ["report", str(tmp_path)])
    assert r.exit_code == 1
    assert r.output.strip() == "error: RuntimeError: something unexpected (PE_BENCH_DEBUG=1 shows the traceback)"
    monkeypatch.setenv("PE_BENCH_DEBUG", "1")
    r = runner.invoke(app, ["report", str(tmp_path)])
    assert isinstance(r.exception, RuntimeError) and str(r.exception) == "something unexpected"  # raised whole
    assert r.exc_info[2] is not None


def test_ctrl_c_during_training_saves_the_last_completed_step_and_exits_130(tmp_path, monkeypatch):
    from pe_bench import train as train_mod

    real, calls = train_mod.random_batch, {"n": 0}

    def ctrl_c_in_step_3(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(train_mod, "random_batch", ctrl_c_in_step_3)
    r = runner.invoke(app, ["train", "scheme=nope", "train=smoke", "eval=smoke", "model.n_layers=1",
                            "model.d_model=32", f"results_dir={tmp_path}", "--no-progress"])
    assert r.exit_code == 130, r.output
    assert "interrupted: run the same command again to resume from the last checkpoint" in r.output
    run = only_run(tmp_path)
    meta = pd.read_json(run / "meta.json", typ="series")
    assert meta["status"] == "interrupted" and meta["checkpoint_step"] == 2
    import torch

    assert torch.load(run / "checkpoint.pt", weights_only=False)["step"] == 2


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGUSR1"])
def test_a_signal_during_training_saves_a_checkpoint_at_the_last_completed_step_and_exits_3(tmp_path, signame):
    """`pe-bench train` signalled once it has logged a step (train.csv written): it stops at the next step boundary,
    saves a checkpoint there (no periodic ones: train.ckpt_interval=0), records 'interrupted' and exits 3. The
    timeouts are only a safety net; the signal is sent on what the run reports."""
    import json
    import signal
    import time

    cmd = [sys.executable, "-m", "pe_bench", "train", "scheme=nope", "train=smoke", "eval=smoke", "model.n_layers=1",
           "model.d_model=32", "train.steps=1000000000", "train.log_interval=1", "train.val_interval=1000000000",
           "train.ckpt_interval=0", "train.threads=1", f"results_dir={tmp_path}", "--no-progress"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 300
        while not list(tmp_path.glob("runs/*/train.csv")):
            assert p.poll() is None, p.stdout.read()
            assert time.monotonic() < deadline, "no step logged in 300 s"
            time.sleep(0.05)
        p.send_signal(getattr(signal, signame))
        out, _ = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 3, out
    assert "(on a signal); run the same command again to resume" in " ".join(out.split())
    run = only_run(tmp_path)
    meta = json.loads((run / "meta.json").read_text())
    logged = pd.read_csv(run / "train.csv")["step"].tolist()
    import torch

    step = torch.load(run / "checkpoint.pt", weights_only=False)["step"]
    assert meta["status"] == "interrupted" and meta["checkpoint_step"] == step == logged[-1] >= 1


@pytest.mark.parametrize("name, garbage", [("meta.json", b'{"status": "do'), ("config.yaml", b"model: [1, 2\n  x: {"),
                                           ("checkpoint.pt", b"PK\x03\x04 not a checkpoint")])
@pytest.mark.parametrize("command", ["eval", "train"])
def test_an_unreadable_run_file_is_one_line_exit_2_for_eval_as_for_train(trained_run, tmp_path, command, name,
                                                                          garbage):
    """meta.json, config.yaml or checkpoint.pt unreadable: `pe-bench eval` of the run, and `pe-bench train` of its
    configuration (asked for a new length, so the checkpoint is needed), are one error line naming the file, exit 2,
    and touch nothing."""
    run = tmp_path / "results" / "runs" / trained_run.name
    shutil.copytree(trained_run, run)
    (run / name).write_bytes(garbage)
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    if command == "eval":
        r = runner.invoke(app, ["eval", str(run), "eval.lengths=[40]"])
    else:
        r = runner.invoke(app, ["train", "scheme=alibi", "train=smoke", "train.steps=3", "model.n_layers=2",
                                "model.d_model=32", "model.n_heads=2", "train.threads=1", "eval.lengths=[40]",
                                "eval.modes=[nonoverlapping]", "eval.variants=false",
                                f"results_dir={tmp_path / 'results'}", "--no-progress"])
    assert r.exit_code == 2, r.output
    out = " ".join(r.output.split())
    assert out.startswith("error: ") and f"{run / name} is unreadable" in out, out
    assert r.output.strip().count("\n") == 0, r.output
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before


def test_ctrl_c_during_a_report_says_the_report_directory_is_as_it_was(tmp_path, monkeypatch):
    from pe_bench.report import pages

    run = next((Path(__file__).resolve().parents[1] / "results" / "tasks" / "runs").glob("passkey-alibi-*"))

    def ctrl_c(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(pages, "write_index", ctrl_c)
    r = runner.invoke(app, ["report", str(run), "--out", str(tmp_path / "rep"), "--no-plots"])
    assert r.exit_code == 130, r.output
    assert "the report directory is as it was" in r.output and "checkpoint" not in r.output
    assert not (tmp_path / "rep").exists()
