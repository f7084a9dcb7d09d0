"""A real Slurm: a sweep submitted as ONE job array, requeue-and-resume on the pre-timeout signal, and the plain
sbatch script. Skipped, with the reason, where no Slurm controller answers (bring one up: scripts/slurm_up.sh)."""

import json
import os
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from pe_bench import schemes
from pe_bench.cli import app
from pe_bench.launchers import slurm_available

WHY = slurm_available()
if WHY and os.environ.get("PE_BENCH_REQUIRE_SLURM"):  # CI brings Slurm up: its absence is a failure there
    raise RuntimeError(f"PE_BENCH_REQUIRE_SLURM is set but {WHY}")
pytestmark = [pytest.mark.slurm, pytest.mark.skipif(WHY is not None, reason=WHY or "")]
runner = CliRunner()
# Started again within the second its previous instance ended, a requeued task is killed by slurmd ("Job credential
# revoked", seen in slurmctld.log): credentials are revoked with 1 s granularity. Slurm's own BeginTime is ~2 min.
START_SOON = "StartTime=now+5"


def meta(run: Path) -> dict:
    return json.loads((run / "meta.json").read_text())


def squeue(job: str) -> list[str]:
    out = subprocess.run(["squeue", "-h", "-r", "-j", job, "-o", "%i %T %r"], capture_output=True, text=True,
                         check=False).stdout
    return [ln for ln in out.splitlines() if ln.strip()]


def wait_until(predicate, timeout: float, what: str, poll: float = 0.5):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def test_every_scheme_with_two_seeds_runs_as_one_slurm_job_array(tmp_path):
    r = runner.invoke(app, ["sweep", "sweep=smoke", f"results_dir={tmp_path}", "--launcher", "slurm", "--wait",
                            "sweep.slurm.poll_s=1", "sweep.slurm.array_parallelism=2"])
    assert r.exit_code == 0, r.output
    n = 2 * len(schemes.available())
    assert "submitted job array" in r.output and f"{n} tasks, at most 2 at once" in r.output
    runs = sorted((tmp_path / "runs").iterdir())
    assert len(runs) == n and all(meta(p)["status"] == "done" for p in runs)
    array_ids = {meta(p)["slurm_job"].split("_")[0] for p in runs}
    assert len(array_ids) == 1  # one array, one task per point
    assert {meta(p)["slurm_job"].split("_")[1] for p in runs} == {str(i) for i in range(n)}
    for p in runs:  # every point trained and evaluated at L..8L
        ev = pd.read_csv(p / "eval.csv")
        assert sorted(ev[ev["scheme"] == meta(p)["scheme"]]["L_eval"].unique()) == [32, 64, 128, 256]
        assert meta(p)["device"].endswith("1 threads)")  # the task's --cpus-per-task=1
    table = pd.read_csv(tmp_path / "smoke" / "comparison.csv")
    base = table[(table["mode"] == "nonoverlapping") & table["scheme"].isin(schemes.available())]
    assert set(base["scheme"]) == set(schemes.available()) and set(base["seeds"]) == {2}
    assert (tmp_path / "smoke" / "ppl_vs_length_nonoverlapping.png").exists()
    again = runner.invoke(app, ["sweep", "sweep=smoke", f"results_dir={tmp_path}", "--launcher", "slurm"])
    assert "nothing to do" in again.output and f"{n} skipped" in again.output


def test_a_task_signalled_before_its_time_limit_checkpoints_is_requeued_and_resumes(tmp_path):
    r = runner.invoke(app, ["sweep", "sweep=smoke", "scheme=alibi", "seed=0", "train.steps=5000", "train.ckpt_interval=0",
                            f"results_dir={tmp_path}", "--launcher", "slurm"])
    assert r.exit_code == 0 and "follow it with: squeue -j" in r.output, r.output
    run = next((tmp_path / "runs").iterdir())
    job = meta(run)["slurm_job"]
    wait_until(lambda: meta(run).get("status") == "running" and (run / "train.csv").exists(), 120, "training")
    # What Slurm does signal_delay_s before the time limit: USR2 to the task (submitit's requeue signal).
    subprocess.run(["scancel", "--signal=USR2", job], check=True)
    wait_until(lambda: meta(run).get("status") == "interrupted", 60, "the checkpoint on the signal")
    stopped_at = meta(run)["checkpoint_step"]
    assert 0 < stopped_at < 5000
    wait_until(lambda: any("PENDING" in ln for ln in squeue(job)), 60, "the requeue")
    again = runner.invoke(app, ["sweep", "sweep=smoke", "scheme=alibi", "seed=0", "train.steps=5000",
                                "train.ckpt_interval=0", f"results_dir={tmp_path}"])
    assert f"in Slurm job {job}: skipped" in again.output and "0 trained" in again.output  # not trained twice
    # A requeued job waits for its BeginTime (about 2 min); as root we let it start sooner (see START_SOON).
    subprocess.run(["scontrol", "update", f"JobId={job}", START_SOON], check=False, capture_output=True)
    wait_until(lambda: meta(run).get("status") == "done", 400, "the requeued task to finish", poll=1)
    assert meta(run)["resumed_from"] == [stopped_at]
    steps = list(pd.read_csv(run / "train.csv")["step"])
    assert steps == sorted(set(steps)) and steps[-1] == 5000  # one history, continued, not restarted


def test_the_emitted_sbatch_array_script_runs_every_point(tmp_path):
    out = tmp_path / "sbatch"
    r = runner.invoke(app, ["sweep", "sweep=smoke", "scheme=alibi,nope", "seed=0", f"results_dir={tmp_path / 'r'}",
                            "--emit-sbatch", str(out)])
    assert r.exit_code == 0 and "submit with: sbatch" in r.output, r.output
    sub = subprocess.run(["sbatch", "--parsable", str(out / "sweep.sbatch")], capture_output=True, text=True,
                         check=True)
    job = sub.stdout.strip().split(";")[0]

    def finished():
        runs = list((tmp_path / "r" / "runs").glob("*/meta.json"))
        return len(runs) == 2 and all(json.loads(m.read_text())["status"] in ("done", "failed") for m in runs)

    wait_until(finished, 300, f"sbatch array {job}", poll=1)
    wait_until(lambda: not squeue(job), 60, f"sbatch array {job} to leave the queue", poll=1)
    runs = sorted((tmp_path / "r" / "runs").iterdir())
    assert [meta(p)["status"] for p in runs] == ["done", "done"], [p.read_text() for p in (out / "logs").iterdir()]
    assert {meta(p)["scheme"] for p in runs} == {"alibi", "nope"}
    logs = sorted((out / "logs").iterdir())
    assert len(logs) == 2 and all("pe-bench train" in p.read_text() for p in logs)


def test_an_sbatch_task_signalled_before_its_time_limit_is_requeued_and_resumes(tmp_path):
    out = tmp_path / "sbatch"
    r = runner.invoke(app, ["sweep", "sweep=smoke", "scheme=alibi", "seed=0", "train.steps=5000",
                            "train.ckpt_interval=0", f"results_dir={tmp_path / 'r'}", "--emit-sbatch", str(out)])
    assert r.exit_code == 0, r.output
    job = subprocess.run(["sbatch", "--parsable", str(out / "sweep.sbatch")], capture_output=True, text=True,
                         check=True).stdout.strip().split(";")[0]
    runs = tmp_path / "r" / "runs"
    run = wait_until(lambda: next((p for p in runs.glob("*") if (p / "train.csv").exists()), None), 120, "training")
    # What #SBATCH --signal=B:USR1@120 does before the time limit: USR1 to the batch script.
    subprocess.run(["scancel", "--batch", "--signal=USR1", f"{job}_1"], check=True)
    wait_until(lambda: meta(run).get("status") == "interrupted", 60, "the checkpoint on the signal")
    stopped_at = meta(run)["checkpoint_step"]
    wait_until(lambda: any("PENDING" in ln for ln in squeue(job)), 60, "the requeue")
    subprocess.run(["scontrol", "update", f"JobId={job}_1", START_SOON], check=False, capture_output=True)
    wait_until(lambda: meta(run).get("status") == "done", 400, "the requeued task to finish", poll=1)
    assert meta(run)["resumed_from"] == [stopped_at] and 0 < stopped_at < 5000
    assert list(pd.read_csv(run / "train.csv")["step"])[-1] == 5000


def test_the_slurm_launcher_runs_one_point_over_several_processes(tmp_path):
    r = runner.invoke(app, ["sweep", "sweep=smoke", "scheme=rope", "seed=0", "train.grad_accum=2",
                            f"results_dir={tmp_path}", "--launcher", "slurm", "--wait", "sweep.slurm.poll_s=1",
                            "sweep.slurm.ddp_processes=2", "sweep.slurm.cpus_per_task=1"])
    assert r.exit_code == 0 and "1 trained" in r.output, r.output
    (run,) = (tmp_path / "runs").iterdir()
    assert meta(run)["status"] == "done" and meta(run)["processes"] == 2  # two Slurm tasks, one DDP run


def test_a_task_killed_from_outside_is_recorded_as_failed(tmp_path):
    import threading

    def cancel_once_training():
        run = wait_until(lambda: next((p for p in (tmp_path / "runs").glob("*") if (p / "train.csv").exists()),
                                      None), 120, "training")
        subprocess.run(["scancel", meta(run)["slurm_job"]], check=True)

    killer = threading.Thread(target=cancel_once_training)
    killer.start()
    r = runner.invoke(app, ["sweep", "sweep=smoke", "scheme=alibi", "seed=0", "train.steps=5000",
                            f"results_dir={tmp_path}", "--launcher", "slurm", "--wait", "sweep.slurm.poll_s=1"])
    killer.join()
    assert r.exit_code == 1 and "1 failed" in r.output, r.output
    (run,) = (tmp_path / "runs").iterdir()
    assert meta(run)["status"] == "failed" and "ended without finishing the run" in meta(run)["error"]
