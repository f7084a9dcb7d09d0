"""Sweeps: points from configs and the command line, dry runs, skipping, resuming, failures, launchers."""

import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from pe_bench import schemes
from pe_bench.cli import app
from pe_bench.config import ConfigError, compose
from pe_bench.distributed import clear_stop, request_stop
from pe_bench.experiment import run_one
from pe_bench.launchers import emit_sbatch
from pe_bench.runs import Run, RunBusy, run_dir_for
from pe_bench.sweep import SweepConfig, expand, load_sweep, plan
from pe_bench.tasks import SyntheticTask, registry
from pe_bench.tasks import get as get_task

runner = CliRunner()
SMOKE = ["sweep=smoke", "model.n_layers=1", "model.d_model=32"]


def invoke(*args):
    return runner.invoke(app, list(args))


def smoke_point(*overrides: str):
    """The config of one point of the smoke sweep (1-layer model) with these overrides."""
    (point,) = expand(load_sweep("smoke"), [*SMOKE[1:], *overrides])
    return compose(point)


def meta(run: Path) -> dict:
    return json.loads((run / "meta.json").read_text())


def test_the_default_sweep_is_every_registered_scheme_with_three_seeds():
    """... plus p-RoPE and HoPE (RoPE with options, sweep.scheme_variants) beside plain RoPE, and the layered
    pattern with local attention, sliding and chunked."""
    points = expand(load_sweep("default"), [])
    assert len(points) == 3 * (len(schemes.available()) + 4)
    plain = [p for p in points if p[-1].startswith("scheme=")]
    assert {(p[-1], next(o for o in p if o.startswith("seed="))) for p in plain} == {
        (f"scheme={s}", f"seed={k}") for s in schemes.available() for k in (0, 1, 2)}
    assert sorted(p[-1] for p in points if not p[-1].startswith("scheme=")) == sorted(
        ["scheme.frequencies_kept=0.75"] * 3 + ["scheme.hope=true"] * 3 + ["scheme.window=16"] * 3
        + ["scheme.chunked=true"] * 3)


def test_command_line_lists_replace_the_config_axes_and_multiply():
    points = expand(load_sweep("paper"), ["scheme=rope,alibi", "seed=0,1,2", "train.seq_len=64,128"])
    combos = {tuple(sorted(o for o in p if o.split("=")[0] in ("scheme", "seed", "train.seq_len"))) for p in points}
    assert len(points) == len(combos) == 2 * 3 * 2
    assert all(p[-1] in ("scheme=rope", "scheme=alibi") for p in points)  # the paper's six were replaced
    assert {compose(p).train.seq_len for p in points} == {64, 128}


def test_hydra_sweep_functions_range_and_glob_work_on_the_command_line():
    points = expand(load_sweep("default"), ["scheme=glob(kerple*)", "seed=range(0,3)"])
    assert sorted((p[-1], next(o for o in p if o.startswith("seed="))) for p in points) == sorted(
        (f"scheme={s}", f"seed={k}") for s in ("kerple_log", "kerple_power") for k in range(3))
    with pytest.raises(ConfigError, match="matches none of: alibi"):
        expand(load_sweep("default"), ["scheme=glob(zz*)"])


def test_grid_axes_and_fixed_overrides_from_a_sweep_config():
    sw = SweepConfig(schemes=["alibi", "t5"], seeds=[3], grid={"model.n_layers": [2, 4]},
                     overrides=["train.steps=5"])
    points = expand(sw, [])
    assert len(points) == 4
    cfgs = [compose(p) for p in points]
    assert {(c.scheme["name"], c.model.n_layers) for c in cfgs} == {("alibi", 2), ("alibi", 4), ("t5", 2), ("t5", 4)}
    assert all(c.seed == 3 and c.train.steps == 5 for c in cfgs)


@pytest.mark.parametrize("args,message", [
    (["sweep=nosuch"], "unknown sweep 'nosuch'; choose one of: code, code_gpu, default, extension, gpu_wikitext2, headscale, paper, smoke"),
    (["sweep.launcher=pbs"], "sweep.launcher='pbs' is not one of: local, slurm"),
    (["sweep.slurm.gpus=2"], "unknown config key 'sweep.slurm.gpus'"),
    (["sweep.local.parallel=0"], "sweep.local.parallel must be >= 1"),
    (["scheme=rope,nosuch"], "unknown scheme 'nosuch'"),
    (["seed=0,0", "scheme=alibi"], "two sweep points give the same run (alibi-tiny-shakespeare-L64-s0-5140bfbd); an "
                                   "override list repeats a value"),
    (["eval.split=validation,test", "scheme=alibi", "seed=0"], "they differ only in eval.split=validation, "
     "eval.split=test, which names no run (evaluation settings): sweep one of them, then evaluate the finished runs "
     "again with `pe-bench eval RUN <setting>`"),
    (["train.threads=1,2", "scheme=alibi", "seed=0"], "they differ only in train.threads=1, train.threads=2, which "
     "names no run: sweep one value of it"),
])
def test_bad_sweeps_are_one_line_errors_before_anything_runs(args, message, tmp_path):
    r = invoke("sweep", *args, f"results_dir={tmp_path}", "--dry-run")
    assert r.exit_code == 2 and message in r.output, r.output
    assert not (tmp_path / "runs").exists()


def test_dry_run_lists_the_points_and_what_would_be_skipped(tmp_path):
    common = [*SMOKE, "seed=0", f"results_dir={tmp_path}"]
    run_one(smoke_point("scheme=alibi", "seed=0", f"results_dir={tmp_path}"), progress=False)
    r = invoke("sweep", "scheme=alibi,nope", *common, "--dry-run")
    assert r.exit_code == 0, r.output
    assert "finished: skipped" in r.output and "to train" in r.output
    assert "1 finished (skipped), 1 to train" in r.output
    assert [p.name.split("-")[0] for p in (tmp_path / "runs").iterdir()] == ["alibi"]  # nothing trained


def test_an_interrupted_point_resumes_from_its_checkpoint_to_the_same_model(tmp_path):
    args = ["scheme=rope", "seed=0", "train.steps=12", "train.log_interval=4"]
    straight = smoke_point(*args, f"results_dir={tmp_path / 'a'}")
    run_one(straight, progress=False)

    interrupted = smoke_point(*args, f"results_dir={tmp_path / 'b'}")
    request_stop()  # as SIGTERM/SIGUSR1 would: stop at the next step boundary
    try:
        with pytest.raises(Exception, match="stopped at step 1/12"):
            run_one(interrupted, progress=False)
    finally:
        clear_stop()
    run = run_dir_for(interrupted)
    assert meta(run)["status"] == "interrupted" and meta(run)["checkpoint_step"] == 1
    r = invoke("sweep", *SMOKE, *args, f"results_dir={tmp_path / 'b'}", "--dry-run")
    assert "resumes from its checkpoint (step 1/12)" in r.output
    r = invoke("sweep", *SMOKE, *args, f"results_dir={tmp_path / 'b'}", "--no-progress")
    assert r.exit_code == 0 and "1 trained" in r.output, r.output
    assert meta(run)["status"] == "done" and meta(run)["resumed_from"] == [1]
    a = pd.read_csv(run_dir_for(straight) / "train.csv")
    b = pd.read_csv(run / "train.csv")
    assert list(b["step"]) == [4, 8, 12]
    pd.testing.assert_series_equal(a["loss"], b["loss"], rtol=1e-5)  # batches replay: the same model


def test_a_failing_point_is_recorded_and_never_stops_the_others(tmp_path):
    # train.device=cuda fails: conftest hides any GPU from tests not marked cuda
    r = invoke("sweep", *SMOKE, "scheme=alibi", "seed=0", "train.device=cuda,cpu", f"results_dir={tmp_path}",
               "--no-progress")
    assert r.exit_code == 1, r.output
    assert "2 points: 1 trained, 0 skipped (finished before), 1 failed" in r.output
    runs = {meta(p)["status"]: p for p in (tmp_path / "runs").iterdir()}
    assert set(runs) == {"done", "failed"}
    assert "no CUDA GPU is visible" in meta(runs["failed"])["error"]
    assert (runs["failed"] / "config.yaml").exists()
    assert (tmp_path / "smoke" / "comparison.csv").exists()  # the report of what finished is still written
    r = invoke("sweep", *SMOKE, "scheme=alibi", "seed=0", "train.device=cuda,cpu", f"results_dir={tmp_path}",
               "--dry-run")
    assert "failed before (RuntimeError: train.device=cuda" in r.output or "failed before" in r.output


def test_a_run_directory_in_use_is_locked_and_skipped(tmp_path):
    cfg = smoke_point("scheme=nope", "seed=0", f"results_dir={tmp_path}")
    run = Run(run_dir_for(cfg))
    run.create(cfg)
    # Holds the lock until it is killed (it waits on its stdin, which the test never closes first): however long the
    # checks below take, the lock is still held.
    hold = ("import fcntl, sys; f = open(sys.argv[1], 'a'); fcntl.flock(f, fcntl.LOCK_EX); "
            "print('locked', flush=True); sys.stdin.read()")
    holder = subprocess.Popen([sys.executable, "-c", hold, str(run.path / ".lock")], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(RunBusy), run.lock():
            pass
        points = expand(load_sweep("smoke"), [*SMOKE[1:], "scheme=nope", "seed=0", f"results_dir={tmp_path}"])
        assert plan(points)[0].state == "running"
        r = invoke("train", *points[0], "--no-progress")
        assert r.exit_code == 4 and "is being trained by another process" in r.output
        assert not run.meta_path.exists()  # nothing recorded over the other process's run
    finally:
        holder.kill()
        holder.wait()
    with run.lock():  # released with the process that held it
        pass


def test_parallel_local_launcher_runs_points_as_processes(tmp_path):
    r = invoke("sweep", *SMOKE, "scheme=alibi,nope", "seed=0", f"results_dir={tmp_path}", "--parallel", "2")
    assert r.exit_code == 0 and "2 trained" in r.output, r.output
    runs = list((tmp_path / "runs").iterdir())
    assert len(runs) == 2 and all(meta(p)["status"] == "done" for p in runs)
    assert all("run: " in (p / "train.log").read_text() for p in runs)  # each process logged to its run
    share = max(1, (os.cpu_count() or 1) // 2)  # the machine's cores shared by the 2 processes
    assert all(meta(p)["device"].endswith(f", {share} threads)") for p in runs), [meta(p)["device"] for p in runs]
    t = pd.read_csv(tmp_path / "smoke" / "comparison.csv")
    assert {s.split("[")[0] for s in t["scheme"]} == {"alibi", "nope"}  # and NoPE's eval-time rows


@pytest.mark.parametrize("path", ["~/.cache/pe-bench", "/tmp/a b,c=d[0]", "it's", "a\\'b", "x\\"])
def test_paths_reach_the_parallel_processes_whole(path):
    """The parallel launcher passes results_dir and cache_dir as Hydra overrides: the default cache directory
    (~/...) and paths with spaces, commas, brackets, quotes or backslashes come back unchanged."""
    from pe_bench.config import hydra_quoted

    assert compose([f"cache_dir={hydra_quoted(path)}", f"results_dir={hydra_quoted(path)}"], scheme=False).cache_dir \
        == path


# `pe-bench ARGS`, killed with SIGKILL (no handler, nothing saved on the way out) the moment it has recorded the first
# checkpoint of the run whose name starts with sys.argv[1]: the same state on any machine, however fast it trains.
KILLED_AFTER_FIRST_CHECKPOINT = """
import os, signal, sys
from pe_bench.runs import Run

prefix = sys.argv.pop(1)
update_meta = Run.update_meta

def update_meta_then_die(self, **fields):
    out = update_meta(self, **fields)
    if fields.get("checkpoint_step") and self.path.name.startswith(prefix):
        os.kill(os.getpid(), signal.SIGKILL)
    return out

Run.update_meta = update_meta_then_die
from pe_bench.cli import main
main()
"""


def test_sigterm_to_a_parallel_sweep_stops_its_points_at_a_checkpoint_and_leaves_no_process_behind(tmp_path):
    """`kill <sweep>` (SIGTERM to the sweep alone, not its process group): the points it started get the signal too,
    save a checkpoint and exit; the sweep says so and exits 3. No training process outlives it, holding a run."""
    sweep = ["sweep", *SMOKE, "scheme=alibi,nope", "seed=0", "train.steps=100000", "train.ckpt_interval=0",
             "--parallel", "2", f"results_dir={tmp_path}", "--no-progress"]
    proc = subprocess.Popen([sys.executable, "-m", "pe_bench", *sweep], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
                            start_new_session=True)
    try:
        logs = []
        for _ in range(6000):  # until both points have trained a step (a safety net of ~10 minutes)
            logs = [p / "train.csv" for p in (tmp_path / "runs").glob("*")]
            if len(logs) == 2 and all(f.exists() and len(f.read_text().splitlines()) > 1 for f in logs):
                break
            __import__("time").sleep(0.1)
        assert len(logs) == 2
        os.kill(proc.pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=600)
    finally:  # its whole process group, whatever happened: a failing sweep must leave no training behind either
        proc.poll()
        survivors = _group_alive(proc.pid)
        with __import__("contextlib").suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == 3, out
    assert not survivors
    assert "run the same command again to resume" in out
    for run in (tmp_path / "runs").glob("*"):
        assert meta(run)["status"] == "interrupted" and meta(run)["checkpoint_step"] >= 1, meta(run)
        assert not Run(run).is_locked()


def _group_alive(pgid: int) -> bool:
    """Whether any process of this process group is still alive (zombies reaped by their parent aside)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_killing_a_sweep_and_starting_it_again_finishes_only_what_was_missing(tmp_path):
    sweep = ["sweep", *SMOKE, "scheme=alibi,nope,t5", "seed=0", "train.steps=100", "train.ckpt_interval=25",
             f"results_dir={tmp_path}", "--no-progress"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    # killed in the middle of the second point, right after its first checkpoint
    first = subprocess.Popen([sys.executable, "-c", KILLED_AFTER_FIRST_CHECKPOINT, "nope-", *sweep],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    try:
        first.wait(timeout=600)  # a safety net: it dies after a few seconds' training
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()
    assert first.returncode == -signal.SIGKILL
    runs = {p.name.split("-")[0]: p for p in (tmp_path / "runs").glob("*") if (p / "meta.json").exists()}
    assert meta(runs["alibi"])["status"] == "done" and meta(runs["nope"])["status"] == "running"
    alibi_started = meta(runs["alibi"])["started"]
    assert meta(runs["nope"])["checkpoint_step"] == 25
    assert "t5" not in runs

    again = subprocess.run([sys.executable, "-m", "pe_bench", *sweep], capture_output=True, text=True, env=env,
                           check=False, timeout=600)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "3 points: 2 trained, 1 skipped (finished before)" in again.stdout
    runs = {p.name.split("-")[0]: p for p in (tmp_path / "runs").iterdir()}
    assert meta(runs["alibi"])["started"] == alibi_started  # not retrained
    assert meta(runs["nope"])["resumed_from"] == [25] and meta(runs["nope"])["status"] == "done"
    assert meta(runs["t5"])["status"] == "done" and "resumed_from" not in meta(runs["t5"])
    assert list(pd.read_csv(runs["nope"] / "train.csv")["step"])[-1] == 100


def test_emit_sbatch_writes_one_override_line_per_point_and_an_array_script(tmp_path):
    sw = load_sweep("smoke", ["slurm.partition=gpu", "slurm.account=lab", "slurm.qos=high", "slurm.gpus_per_node=1",
                              "slurm.time_min=30", "slurm.array_parallelism=3"])
    points = plan(expand(sw, [*SMOKE[1:], "scheme=alibi,rope", "seed=0,1", f"results_dir={tmp_path / 'r'}"]))
    jobs, script = emit_sbatch(points, sw.slurm, tmp_path / "out", sw.name)
    lines = jobs.read_text().splitlines()
    assert len(lines) == 4
    for line, p in zip(lines, points):
        assert compose(shlex.split(line)) == p.cfg  # the very config of the point (results_dir made absolute)
    text = script.read_text()
    for opt in ("--array=1-4%3", "--partition=gpu", "--account=lab", "--qos=high", "--gpus-per-node=1",
                "--time=30", "--requeue", "--signal=B:USR1@120"):
        assert f"#SBATCH {opt}" in text
    assert 'sed -n "${SLURM_ARRAY_TASK_ID}p"' in text and "-m pe_bench train" in text
    assert subprocess.run(["bash", "-n", str(script)], check=False).returncode == 0


def test_sweep_configs_shipped_with_pe_bench_all_load():
    for name in ("default", "paper", "smoke"):
        sw = load_sweep(name)
        assert sw.name == name and expand(sw, [])
    with pytest.raises(ConfigError, match="unknown sweep"):
        load_sweep("nope")


@pytest.mark.slow
def test_every_registered_scheme_with_two_seeds_sweeps_locally(tmp_path):
    r = invoke("sweep", "sweep=smoke", f"results_dir={tmp_path}", "--no-progress")
    n = 2 * len(schemes.available())
    assert r.exit_code == 0 and f"{n} points: {n} trained, 0 skipped (finished before), 0 failed" in r.output, r.output
    table = pd.read_csv(tmp_path / "smoke" / "comparison.csv", keep_default_na=False)
    base = table[(table["mode"] == "nonoverlapping") & table["scheme"].isin(schemes.available())]
    assert set(base["scheme"]) == set(schemes.available()) and set(base["seeds"]) == {2}
    at_8L = base.set_index("scheme")["256"]
    assert at_8L["learned"] == "n/a"  # no table rows past L, in both seeds
    assert all("±" in str(v) for v in at_8L.drop("learned"))  # mean ± std over the two seeds


def test_a_stop_request_during_evaluation_leaves_the_run_to_be_evaluated_again(tmp_path):
    from pe_bench.distributed import StopRequested
    from pe_bench.experiment import evaluate_run

    cfg = smoke_point("scheme=alibi", "seed=0", f"results_dir={tmp_path}")
    run = run_one(cfg, progress=False)
    before = (run.path / "eval.csv").read_text()
    request_stop()
    try:
        with pytest.raises(StopRequested, match="stopped before evaluating at length 32"):
            evaluate_run(run, cfg)
    finally:
        clear_stop()
    assert (run.path / "eval.csv").read_text() == before  # nothing half-written


def test_the_main_job_and_the_default_sweep_train_with_the_quick_recipe_and_its_pinned_threads():
    """`sweep=paper` is the paper's six schemes × seed 0; it and the default sweep train every point with the quick
    recipe at L = 64, whose train.threads is pinned at 2 (the same numbers on any machine with the same torch and
    instruction set) and which checkpoints every 250 steps."""
    paper = [compose(p) for p in expand(load_sweep("paper"), [])]
    assert [c.scheme["name"] for c in paper] == ["nope", "sinusoidal", "learned", "rope", "alibi", "t5"]
    assert {c.seed for c in paper} == {0}
    for c in paper + [compose(p) for p in expand(load_sweep("default"), [])]:
        assert (c.train.name, c.train.seq_len, c.train.threads, c.train.ckpt_interval) == ("quick", 64, 2, 250)


def test_the_paper_and_default_sweeps_share_their_seed_0_runs(tmp_path):
    """A point's run directory is named by what changes the trained model, whichever sweep produced it."""
    def dirs(name):
        return {run_dir_for(compose(p)) for p in expand(load_sweep(name), [f"results_dir={tmp_path}"])}

    paper, default = dirs("paper"), dirs("default")
    assert len(paper) == 6 and paper <= default


def test_train_threads_null_leaves_torch_its_default_thread_count(tmp_path):
    """train.threads=null uses every core torch sees: the run records the thread count a fresh torch process
    starts with on this machine (computed here, not assumed)."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    fresh = subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"], capture_output=True,
                           text=True, env=env, check=True, timeout=600).stdout.strip()
    p = subprocess.run([sys.executable, "-m", "pe_bench", "train", "scheme=nope", "train=smoke", "train.steps=2",
                        "eval=smoke", "eval.lengths=[32]", "eval.modes=[nonoverlapping]", "eval.variants=false",
                        "model.n_layers=1", "model.d_model=32", "train.threads=null", f"results_dir={tmp_path}",
                        "--no-progress"], capture_output=True, text=True, env=env, timeout=600, check=False)
    assert p.returncode == 0, p.stdout + p.stderr
    (run,) = (tmp_path / "runs").iterdir()
    assert meta(run)["numerics"].endswith(f", {fresh} threads"), (meta(run)["numerics"], fresh)


def test_a_point_whose_evaluation_split_is_too_short_stops_the_sweep_before_any_training(tmp_path, monkeypatch):
    """Every point's evaluation split is checked first (each corpus loaded once for all its points): L = 128 needs
    4 windows of 8L = 1024 tokens, more than the 3 KB validation split, so nothing trains, not even the L = 16
    point."""
    from pe_bench import data

    corpus = tmp_path / "small.txt"
    corpus.write_text("a short corpus line\n" * 3000)
    loads, real = [], data.load_tokens

    def counted(*args, **kwargs):
        loads.append(args[0].path)
        return real(*args, **kwargs)

    monkeypatch.setattr(data, "load_tokens", counted)
    r = invoke("sweep", *SMOKE, "scheme=nope", "seed=0", "data=local", f"data.path={corpus}",
               "train.seq_len=16,128", f"results_dir={tmp_path / 'results'}", "--no-progress")
    assert r.exit_code == 2, r.output
    assert "the evaluation split has" in r.output and "shorter eval.lengths" in r.output
    assert loads == [str(corpus)]
    assert not (tmp_path / "results" / "runs").exists()


def test_a_run_directory_with_an_unreadable_config_yaml_is_left_alone_and_counted_failed(tmp_path):
    cfg = smoke_point("scheme=nope", "seed=0", f"results_dir={tmp_path}")
    run = Run(run_dir_for(cfg))
    run.create(cfg)
    run.update_meta(status="running")  # a status is reached through running
    run.update_meta(status="done")
    run.config.write_text("model: [1, 2\n  x: {")
    args = [*SMOKE, "scheme=nope", "seed=0", f"results_dir={tmp_path}"]
    r = invoke("sweep", *args, "--dry-run")
    out = " ".join(r.output.split())
    assert r.exit_code == 0 and "1 unreadable (left out)" in out and "is unreadable (while parsing" in out, r.output
    r = invoke("sweep", *args, "--no-progress")
    out = " ".join(r.output.split())
    assert r.exit_code == 1 and "1 points: 0 trained, 0 skipped (finished before), 1 failed" in out, r.output
    assert "corrupt" in out and "is unreadable (while parsing" in out  # its row in the summary, with the reason
    assert run.config.read_text() == "model: [1, 2\n  x: {" and not run.checkpoint.exists()


def test_the_shipped_sweeps_are_the_points_the_readme_lists():
    """docs/sweeps.md: smoke (every scheme × seeds 0, 1; smoke recipe, 2-layer model), tasks (the paper's six and the
    ten schemes flat to 8L × the eleven synthetic tasks × seeds 0, 1, 2, each task with its own recipe and model, two
    processes at once: 528 points), extension (rope × seed 0, then 5 methods × budgets 25, 100, 400, and 0 for the
    parent's rows), headscale (nope × seeds 0, 1, 2, then HeadScale and a full fine-tune × 200 steps)."""
    def points(name):
        return [compose(p) for p in expand(load_sweep(name), [])]

    smoke = points("smoke")
    assert sorted((c.scheme["name"], c.seed) for c in smoke) == sorted(
        (s, k) for s in schemes.available() for k in (0, 1))
    assert {(c.train.name, c.model.n_layers) for c in smoke} == {("smoke", 2)}
    six = ["nope", "sinusoidal", "learned", "rope", "alibi", "t5"]
    flat = ["stickbreaking", "xl", "kerple_log", "kerple_power", "fox", "dape", "cope", "sandwich", "shaw", "conv"]
    synthetic = sorted(n for n, t in registry().items() if issubclass(t, SyntheticTask))
    tasks = [dict(o.split("=", 1) for o in p) for p in expand(load_sweep("tasks"), [])]
    assert len(tasks) == 528 and sorted((p["scheme"], p["task"], int(p["seed"])) for p in tasks) == sorted(
        (s, t, k) for s in six + flat for t in synthetic for k in (0, 1, 2))
    one_each = [compose(p) for p in expand(load_sweep("tasks"), ["scheme=rope", "seed=0"])]  # a point per task
    assert all(c.train.name == get_task(c.task.name).recipe for c in one_each)  # each task's own recipe
    assert {c.task.name: c.model.name for c in one_each} == {  # and model: the binding tasks bring theirs
        t: get_task(t).model or "tiny" for t in synthetic}
    assert {c.model.name for c in one_each} == {"tiny", "tiny_fan_in"}
    assert {c.train.seq_len for c in one_each} == {32} and len(one_each) == len(synthetic)
    assert load_sweep("tasks").local.parallel == 2
    ext = load_sweep("extension")
    assert [(c.scheme["name"], c.seed) for c in map(compose, expand(ext, []))] == [("rope", 0)]
    assert ext.extension.steps == [0, 25, 100, 400] and len(ext.extension.methods) == 5
    hs = load_sweep("headscale")  # NoPE × seeds 0-2, then HeadScale and a full fine-tune, 200 steps (0: uniform λ)
    assert [(c.scheme["name"], c.seed) for c in map(compose, expand(hs, []))] == [("nope", k) for k in (0, 1, 2)]
    assert hs.extension.steps == [0, 200] and set(hs.extension.methods) == {"headscale", "finetune"}
    assert "finetune.trainable=scheme" in hs.extension.methods["headscale"]


def test_a_point_that_failed_before_is_retried(tmp_path):
    cfg = smoke_point("scheme=nope", "seed=0", f"results_dir={tmp_path}")
    run = Run(run_dir_for(cfg))
    run.create(cfg)
    run.update_meta(status="failed", error="RuntimeError: something went wrong")
    args = [*SMOKE, "scheme=nope", "seed=0", "eval.variants=false", f"results_dir={tmp_path}"]
    r = invoke("sweep", *args, "--dry-run")
    assert r.exit_code == 0 and "1 failed before (retried)" in r.output, r.output
    r = invoke("sweep", *args, "--no-progress")
    assert r.exit_code == 0 and "1 trained" in r.output, r.output
    assert meta(run.path)["status"] == "done" and meta(run.path)["error"] is None


def test_a_sweep_says_when_its_finished_points_were_made_with_other_cpu_kernels(tmp_path):
    """Runs made with other CPU kernels are rows apart in the report (docs/trust.md, "Determinism"): a sweep that
    would train new points beside finished ones of another instruction set says so before it starts."""
    run_one(smoke_point("scheme=alibi", "seed=0", f"results_dir={tmp_path}"), progress=False)
    args = ["sweep", *SMOKE, "scheme=alibi", "seed=0,1", f"results_dir={tmp_path}", "--dry-run"]
    assert "other CPU kernels" not in invoke(*args).output  # the same machine: nothing to say
    (run,) = (tmp_path / "runs").iterdir()
    m = meta(run)
    m["numerics"] = m["numerics"].replace(", cpu ", ", cpu NONE-", 1)
    (run / "meta.json").write_text(json.dumps(m))
    r = invoke(*args)
    assert r.exit_code == 0, r.output
    assert "finished points were made with other CPU kernels (1 with NONE-" in " ".join(r.output.split())
