"""Progress off a terminal is plain log lines: training steps, each finished evaluation, a summary per run; and a
sweep's time estimate comes from finished runs of the same shape, or is unknown."""

import re

import numpy as np
import pytest
import torch

from pe_bench import progress
from pe_bench.build import build_model
from pe_bench.config import compose
from pe_bench.evaluate.perplexity import evaluate
from pe_bench.experiment import run_one
from pe_bench.progress import TrainProgress, duration
from pe_bench.runs import Run, RunMeta, run_dir_for
from pe_bench.sweep import estimate, plan

DEV = torch.device("cpu")
TINY = ["train=smoke", "eval=smoke", "model.n_layers=1", "model.d_model=32"]
STEP_LINE = (r"(?P<name>\S+) step (?P<step>\d+)/(?P<total>\d+) \((?P<pct>\d+)%\) loss \d+\.\d{3} lr \d\.\de-\d\d "
             r"[\d,]+ tok/s ETA (\d+s|\d+m\d\ds|\d+h\d\dm)")
EVAL_LINE = (r"(?P<name>\S+) eval L=(?P<L>\d+) (?P<mode>nonoverlapping|sliding): ppl (?P<ppl>\d+\.\d\d) "
             r"\((?P<windows>[\d,]+) windows, (?P<tokens>[\d,]+) tokens, [\d,]+ tok/s, \d+\.\d s\)")


def test_training_with_the_bar_off_prints_plain_step_lines_and_a_run_summary(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(progress, "LINE_MIN_S", 0.0)  # a line per 5% of the run, however fast it goes
    cfg = compose(["scheme=rope", *TINY, "train.steps=40", f"results_dir={tmp_path}"])
    run = run_one(cfg, progress=False)
    out = capsys.readouterr().out
    assert "\x1b" not in out and "[bold" not in out  # plain text: greps well
    steps = [m for m in (re.fullmatch(STEP_LINE, ln) for ln in out.splitlines()) if m]
    assert [int(m["step"]) for m in steps] == list(range(2, 41, 2))  # every 5% of 40 steps
    assert all(m["name"] == run.path.name and m["total"] == "40" for m in steps)
    assert steps[-1]["pct"] == "100" and steps[-1].group(0).endswith("ETA 0s")
    evals = [m for m in (re.fullmatch(EVAL_LINE, ln) for ln in out.splitlines()) if m]
    assert {(int(m["L"]), m["mode"]) for m in evals} == {(n, mode) for n in (32, 64, 128, 256)
                                                           for mode in ("nonoverlapping", "sliding")}
    meta = run.meta()
    summary = [ln for ln in out.splitlines() if ln.startswith("done ")]
    assert len(summary) == 1, out
    m = re.fullmatch(rf"done {re.escape(run.path.name)}: final train loss (\d+\.\d{{3}}), ppl (\d+\.\d\d) at L=32, "
                     r"(\d+\.\d\d) at 256 \(8L\), wall (\d+s|\d+m\d\ds)", summary[0])
    assert m, summary[0]
    assert float(m[1]) == pytest.approx(meta.final_train_loss, abs=1e-3)
    at_l = next(e for e in evals if e["L"] == "32" and e["mode"] == "nonoverlapping")
    assert m[2] == at_l["ppl"]  # the summary's numbers are the evaluation's


def test_training_lines_come_every_30_s_or_5_percent_whichever_later_and_at_least_every_5_min(capsys):
    def lines_for(seconds_per_step: float, total: int) -> list[str]:
        t = {"now": 0.0}
        shown = TrainProgress("r", 0, total, 1000, bar=False, clock=lambda: t["now"])
        for done in range(1, total + 1):
            t["now"] += seconds_per_step
            shown.step(done, torch.tensor(2.0), 1e-3)
        shown.close()
        return capsys.readouterr().out.splitlines()

    fast = lines_for(0.125, 1000)  # 5% = 6.25 s: one line per 30 s
    assert [ln.split()[2] for ln in fast] == ["240/1000", "480/1000", "720/1000", "960/1000", "1000/1000"]
    assert fast[0] == "r step 240/1000 (24%) loss 2.000 lr 1.0e-03 8,000 tok/s ETA 1m35s"
    slow = lines_for(10.0, 200)  # 5% = 100 s: one line per 5% of the run
    assert [int(ln.split()[2].split("/")[0]) for ln in slow] == list(range(10, 201, 10))
    very_slow = lines_for(20.0, 1000)  # 5% = 1000 s: still a line every 5 minutes
    assert [int(ln.split()[2].split("/")[0]) for ln in very_slow][:3] == [15, 30, 45]
    assert duration(59.6) == "1m00s" and duration(7500) == "2h05m"


def test_training_on_another_rank_or_with_a_bar_prints_no_plain_lines(capsys):
    for kwargs in ({"bar": False, "quiet": True}, {"bar": True}):
        shown = TrainProgress("r", 0, 3, 10, clock=lambda: 0.0, **kwargs)
        for done in (1, 2, 3):
            shown.step(done, torch.tensor(1.0), 1e-3)
        shown.close()
        assert "step" not in capsys.readouterr().out


def test_evaluation_off_a_terminal_prints_one_line_per_length_and_mode(capsys):
    cfg = compose(["scheme=learned", "model.n_layers=1", "model.d_model=32", "train.seq_len=16", "eval=smoke"])
    torch.manual_seed(0)
    model = build_model(cfg, 256).eval()
    tokens = np.random.default_rng(0).integers(0, 256, 5000).astype(np.uint8)
    ev = evaluate(model, cfg, tokens, np.ones(256, dtype=np.int64), DEV, name="my-run")
    rows = ev.rows
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 5, lines  # 16 × two modes; 32, 64, 128 past the table: one line each
    done = [re.fullmatch(EVAL_LINE, ln) for ln in lines[:2]]
    assert all(done) and [m["mode"] for m in done] == ["nonoverlapping", "sliding"]
    for m in done:
        row = next(r for r in rows if r["L_eval"] == 16 and r["mode"] == m["mode"])
        assert m["name"] == "my-run" and int(m["tokens"].replace(",", "")) == row["tokens_scored"]
        assert float(m["ppl"]) == pytest.approx(row["ppl"], abs=0.006)
    assert int(done[0]["windows"]) == 2048 // 16
    assert [ln.split(":")[0] for ln in lines[2:]] == [f"my-run eval L={n}" for n in (32, 64, 128)]
    assert lines[2].startswith("my-run eval L=32: not applicable (") and "16 rows" in lines[2]
    evaluate(model, cfg, tokens, np.ones(256, dtype=np.int64), DEV, name="my-run", quiet=True)
    assert capsys.readouterr().out == ""


def _points(tmp_path, *overrides):
    return plan([["scheme=rope", *TINY, f"results_dir={tmp_path}", *o.split()] for o in overrides])


def _finished(tmp_path, overrides: str, wall: float, train: float) -> None:
    """A finished run's directory as estimate() reads it: config.yaml and meta.json."""
    cfg = compose(["scheme=rope", *TINY, f"results_dir={tmp_path}", *overrides.split()])
    run = Run(run_dir_for(cfg))
    run.create(cfg)
    run.update_meta(status="running")  # a status is reached through running
    run.update_meta(status="done", wall_seconds=wall, train_seconds=train, eval_seconds=wall - train - 1,
                    device="cpu (x86_64, 2 threads)")


def test_estimate_uses_finished_runs_of_the_same_shape_and_says_unknown_without_one(tmp_path):
    todo = _points(tmp_path, "seed=1", "seed=2")
    assert estimate(todo) == (None, "no finished run of this shape: unknown")
    _finished(tmp_path, "seed=0", wall=100.0, train=80.0)
    _finished(tmp_path, "seed=9 train.steps=50", wall=900.0, train=880.0)  # another recipe: not used
    seconds, basis = estimate(_points(tmp_path, "seed=1", "seed=2"))
    assert seconds == pytest.approx(200.0)
    assert basis == "from 1 finished run of the same shape, on cpu (x86_64, 2 threads)"
    assert estimate(_points(tmp_path, "seed=1", "seed=2"), parallel=2)[0] == pytest.approx(100.0)

    resume = _points(tmp_path, "seed=1")
    resume[0].state, resume[0].meta = "resume", RunMeta(checkpoint_step=10)  # half of train=smoke's 20 steps
    assert estimate(resume)[0] == pytest.approx(100.0 - 80.0 / 2)

    other = plan([["scheme=alibi", *TINY, f"results_dir={tmp_path}", "seed=1"]])
    seconds, basis = estimate(other)  # no alibi run: rope's, said so
    assert seconds == pytest.approx(100.0) and "another scheme" in basis

    mixed = _points(tmp_path, "seed=1", "seed=3 train.steps=30")
    assert estimate(mixed) == (None, "unknown: 1 of 2 points to do have no finished run of their shape "
                                     "(the other 1: ~1m40s)")
    done = _points(tmp_path, "seed=0")
    done[0].state = "done"
    assert estimate(done) == (0.0, "nothing to do")


def test_a_step_lines_loss_is_the_mean_since_the_previous_line(capsys):
    t = {"now": 0.0}
    shown = TrainProgress("r", 0, 40, 1000, bar=False, clock=lambda: t["now"])
    for done in range(1, 41):  # 5% of 40 steps = 2, 31 s a step (past the 30 s minimum): a line every 2 steps
        t["now"] += 31.0
        shown.step(done, torch.tensor(float(done)), 1e-3)
    shown.close()
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split()[2] for ln in lines[:3]] == ["2/40", "4/40", "6/40"]
    assert [float(ln.split()[5]) for ln in lines] == [2 * k - 0.5 for k in range(1, 21)]  # mean of steps 2k-1, 2k


def test_a_log_gets_one_line_per_mode_and_verbose_one_per_length(tmp_path):
    """Off a terminal (stdout a pipe, as in a log file or a Slurm job): one summary line per scheme variant and mode;
    `--verbose` (or PE_BENCH_VERBOSE=1) brings back one line per length × mode."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "PE_BENCH_VERBOSE"}
    args = ["train", "scheme=alibi", "train=smoke", "eval=smoke", "model.n_layers=2", "model.d_model=32",
            "model.n_heads=2", "train.steps=4", "eval.variants=false", "--no-progress"]
    outs = []
    for extra in ([], ["--verbose"]):
        r = subprocess.run([sys.executable, "-m", "pe_bench", *args, f"results_dir={tmp_path / str(len(extra))}",
                            *extra], capture_output=True, text=True, env=env)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
        outs.append([line for line in r.stdout.splitlines() if line.startswith("alibi-") and " eval " in line])
    summary, verbose = outs
    assert [line.split(" eval ")[1].split(":")[0] for line in summary] == ["nonoverlapping", "sliding"]
    assert re.search(r"eval nonoverlapping: ppl \d+\.\d\d at 32, \d+\.\d\d at 64, \d+\.\d\d at 128, \d+\.\d\d at 256$",
                     summary[0]), summary[0]
    assert len(verbose) == 8 and all(re.match(EVAL_LINE, line) for line in verbose), verbose
