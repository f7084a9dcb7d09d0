"""One run over several processes (DDP via torchrun), on the CPU with the gloo backend."""

import json
import os
import signal
import subprocess
import sys

import pandas as pd

ARGS = ["scheme=rope", "train=smoke", "eval=smoke", "model.n_layers=2", "model.d_model=64", "train.steps=20",
        "train.grad_accum=2", "--no-progress"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
SAFETY_S = 400  # per command; two of them stay inside pytest-timeout's 900 s for the test


def bounded(cmd: list[str]) -> subprocess.CompletedProcess:
    """Run cmd in its own session; should it outlive a generous safety net, it is killed with every process it
    started (torchrun's workers too) and the test fails."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV,
                         start_new_session=True)
    try:
        out, err = p.communicate(timeout=SAFETY_S)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        raise AssertionError(f"{' '.join(cmd)} still running after {SAFETY_S} s:\n{err[-2000:]}") from None
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)


def torchrun(n: int, *args: str) -> subprocess.CompletedProcess:
    return bounded([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={n}", "-m",
                    "pe_bench", "train", *args])


def test_two_processes_train_the_same_model_as_one(tmp_path):
    two = torchrun(2, *ARGS, f"results_dir={tmp_path / 'two'}")
    assert two.returncode == 0, two.stderr[-2000:]
    one = bounded([sys.executable, "-m", "pe_bench", "train", *ARGS, "train.threads=1",
                   f"results_dir={tmp_path / 'one'}"])
    assert one.returncode == 0, one.stderr[-2000:]
    (run2,) = (tmp_path / "two" / "runs").iterdir()
    (run1,) = (tmp_path / "one" / "runs").iterdir()
    assert run1.name == run2.name  # the same run: DDP splits each step's micro-batches, not the recipe
    meta = json.loads((run2 / "meta.json").read_text())
    assert meta["status"] == "done" and meta["processes"] == 2
    a, b = pd.read_csv(run1 / "train.csv"), pd.read_csv(run2 / "train.csv")
    pd.testing.assert_series_equal(a["loss"], b["loss"], rtol=1e-4)
    pd.testing.assert_series_equal(a["val_loss"], b["val_loss"], rtol=1e-4)
    e1, e2 = pd.read_csv(run1 / "eval.csv"), pd.read_csv(run2 / "eval.csv")
    pd.testing.assert_series_equal(e1["ppl"], e2["ppl"], rtol=1e-3)
    assert two.stdout.count("run: ") == 1  # rank 0 alone reports


def test_grad_accum_must_split_evenly_between_processes(tmp_path):
    bad = torchrun(2, *[a for a in ARGS if not a.startswith("train.grad_accum")], "train.grad_accum=3",
                   f"results_dir={tmp_path}")
    assert bad.returncode != 0
    assert "train.grad_accum=3 must be a multiple of the 2 processes; set train.grad_accum=2" in bad.stderr
