"""A real Slurm: a sweep submitted as ONE job array, requeue-and-resume on the pre-timeout signal, and the plain
sbatch script. Skipped, with the reason, where no Slurm controller answers (bring one up: scripts/slurm_up.sh).

No test here depends on the machine's speed: every wait ends on a condition (a file written, a status recorded, the
queue empty), with SAFETY_S only as a net against a stuck scheduler. A run that must still be training when it is
signalled or cancelled trains NEVER steps, which no machine finishes; it is signalled as soon as it has logged a
step. Whatever a test leaves in the queue is cancelled, and waited for, when it ends (`slurm_jobs`)."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
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
SAFETY_S = 600  # a net for a stuck scheduler, never a duration a test relies on
NEVER = 10**9  # train.steps that no machine trains within SAFETY_S: such a run is still training when signalled


def meta(run: Path) -> dict:
    return json.loads((run / "meta.json").read_text())


def squeue(job: str) -> list[str]:
    out = subprocess.run(["squeue", "-h", "-r", "-j", job, "-o", "%i %T %r"], capture_output=True, text=True,
                         check=False).stdout
    return [ln for ln in out.splitlines() if ln.strip()]


def wait_until(predicate, timeout: float, what: str, poll: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def while_queued(job: str, predicate, what: str, poll: float = 0.5):
    """wait_until(predicate), failing at once should the job leave the queue first (it ended without it, e.g. a
    task that could not start): the safety net is then not waited for."""
    gone = 0

    def check():
        nonlocal gone
        value = predicate()
        if value:
            return value
        gone = gone + 1 if not squeue(job) else 0
        if gone >= 2:  # seen out of the queue twice: not a transient answer
            value = predicate()  # it may have happened just before the job ended
            assert value, f"job {job} left the queue before {what}"
        return value

    return wait_until(check, SAFETY_S, what, poll)


def training_run(root: Path) -> Path | None:
    """A run under root that has logged a training step (train.csv is written at each log line)."""
    return next((p for p in root.glob("runs/*") if (p / "train.csv").exists()), None)


def steps_logged(run: Path) -> list[int]:
    return list(pd.read_csv(run / "train.csv")["step"])


def jobs_under(root: Path) -> set[str]:
    """The Slurm jobs recorded in the runs under root (submitit's array tasks)."""
    jobs = set()
    for m in root.rglob("meta.json"):
        try:
            job = json.loads(m.read_text()).get("slurm_job")
        except (OSError, ValueError):
            continue
        if job:
            jobs.add(job.split("_")[0])
    return jobs


def cancel(*jobs: str) -> None:
    if jobs:
        subprocess.run(["scancel", *jobs], check=False, capture_output=True)


def processes_mentioning(text: str) -> list[str]:
    found = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if text in cmd:
                found.append(f"{p.name}: {cmd}")
    return found


@pytest.fixture(autouse=True)
def slurm_jobs(tmp_path):
    """Job ids a test submits with sbatch itself (submitit's are found in the runs' meta.json). When the test ends,
    every one of them still queued or running is cancelled; the test ends only once Slurm holds none of them and no
    process started for it is left (each one's command line names tmp_path)."""
    submitted: list[str] = []
    yield submitted
    jobs = jobs_under(tmp_path) | set(submitted)
    cancel(*jobs)
    wait_until(lambda: not any(squeue(j) for j in jobs), SAFETY_S, f"jobs {sorted(jobs)} to leave the queue")
    wait_until(lambda: not processes_mentioning(str(tmp_path)), SAFETY_S, "the jobs' processes to end")


@contextmanager
def cancelled_after(root: Path, seconds: float, what: str):
    """`--wait` returns once Slurm holds none of the array's tasks: should the queue be stuck, the jobs submitted
    under root are cancelled after `seconds`, so the test fails instead of hanging."""
    fired = threading.Event()

    def fire():
        fired.set()
        cancel(*jobs_under(root))

    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
    if fired.is_set():
        raise AssertionError(f"{what} was still in the queue after {seconds:.0f} s: its jobs were cancelled")


def pe_bench(*args: str) -> tuple[int, str]:
    """`pe-bench ARGS` as a process (its own session), killed with all it started should it outlive SAFETY_S."""
    p = subprocess.Popen([sys.executable, "-m", "pe_bench", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=SAFETY_S)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        raise AssertionError(f"pe-bench {' '.join(args)} still running after {SAFETY_S} s:\n{out[-2000:]}") from None
    return p.returncode, out


def test_every_scheme_with_two_seeds_runs_as_one_slurm_job_array(tmp_path):
    with cancelled_after(tmp_path, 3 * SAFETY_S, "the smoke sweep's job array"):
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
    for p in runs:  # meta.json names the task's own log, which is there to read
        log = Path(meta(p)["slurm_log"])
        assert log.is_file() and meta(p)["slurm_job"] in log.name, (p.name, log)
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


def resumed_and_training_past(run: Path, step: int) -> bool:
    """The requeued task resumed from the checkpoint at `step` and has logged a step past it."""
    m = meta(run)
    return bool(m.get("resumed_from")) and m.get("status") == "running" and max(steps_logged(run)) > step


def test_a_task_signalled_before_its_time_limit_checkpoints_is_requeued_and_resumes(tmp_path):
    """The task trains NEVER steps: still training when signalled on any machine. Once the requeued task has resumed
    and logged a step past its checkpoint, the test ends (and slurm_jobs cancels it)."""
    point = ["sweep", "sweep=smoke", "scheme=alibi", "seed=0", f"train.steps={NEVER}", "train.ckpt_interval=0",
             f"results_dir={tmp_path}"]
    r = runner.invoke(app, [*point, "--launcher", "slurm"])
    assert r.exit_code == 0 and "follow it with: squeue -j" in r.output, r.output
    run = next((tmp_path / "runs").iterdir())
    job = meta(run)["slurm_job"]
    while_queued(job, lambda: meta(run).get("status") == "running" and (run / "train.csv").exists(), "training")
    # What Slurm does signal_delay_s before the time limit: USR2 to the task (submitit's requeue signal).
    subprocess.run(["scancel", "--signal=USR2", job], check=True)
    wait_until(lambda: meta(run).get("status") == "interrupted", SAFETY_S, "the checkpoint on the signal")
    stopped_at = meta(run)["checkpoint_step"]
    assert 0 < stopped_at < NEVER
    before = steps_logged(run)
    wait_until(lambda: any("PENDING" in ln for ln in squeue(job)), SAFETY_S, "the requeue")
    # The same sweep, here: the point is Slurm's, not trained twice. (As a process: were it trained here after all,
    # NEVER steps would be a failure after SAFETY_S, not a hang.)
    rc, out = pe_bench(*point)
    assert rc == 0 and f"in Slurm job {job}: skipped" in out and "0 trained" in out, out
    # A requeued job waits for its BeginTime (about 2 min); as root we let it start sooner (see START_SOON).
    subprocess.run(["scontrol", "update", f"JobId={job}", START_SOON], check=False, capture_output=True)
    while_queued(job, lambda: resumed_and_training_past(run, stopped_at), "the requeued task trained on", poll=1)
    assert meta(run)["resumed_from"] == [stopped_at]
    steps = steps_logged(run)
    assert steps[: len(before)] == before and min(steps[len(before):]) > stopped_at  # one history, continued


def test_the_emitted_sbatch_array_script_runs_every_point(tmp_path, slurm_jobs):
    out = tmp_path / "sbatch"
    r = runner.invoke(app, ["sweep", "sweep=smoke", "scheme=alibi,nope", "seed=0", f"results_dir={tmp_path / 'r'}",
                            "--emit-sbatch", str(out)])
    assert r.exit_code == 0 and "submit with: sbatch" in r.output, r.output
    sub = subprocess.run(["sbatch", "--parsable", str(out / "sweep.sbatch")], capture_output=True, text=True,
                         check=True)
    job = sub.stdout.strip().split(";")[0]
    slurm_jobs.append(job)

    def finished():
        runs = list((tmp_path / "r" / "runs").glob("*/meta.json"))
        return len(runs) == 2 and all(json.loads(m.read_text())["status"] in ("done", "failed") for m in runs)

    while_queued(job, finished, f"sbatch array {job} recorded both runs", poll=1)
    wait_until(lambda: not squeue(job), SAFETY_S, f"sbatch array {job} to leave the queue", poll=1)
    runs = sorted((tmp_path / "r" / "runs").iterdir())
    assert [meta(p)["status"] for p in runs] == ["done", "done"], [p.read_text() for p in (out / "logs").iterdir()]
    assert {meta(p)["scheme"] for p in runs} == {"alibi", "nope"}
    logs = sorted((out / "logs").iterdir())
    assert len(logs) == 2 and all("pe-bench train" in p.read_text() for p in logs)


def test_an_sbatch_task_signalled_before_its_time_limit_is_requeued_and_resumes(tmp_path, slurm_jobs):
    """As the submitit test above: NEVER steps, signalled once training, ended once resumed and training on."""
    out = tmp_path / "sbatch"
    r = runner.invoke(app, ["sweep", "sweep=smoke", "scheme=alibi", "seed=0", f"train.steps={NEVER}",
                            "train.ckpt_interval=0", f"results_dir={tmp_path / 'r'}", "--emit-sbatch", str(out)])
    assert r.exit_code == 0, r.output
    job = subprocess.run(["sbatch", "--parsable", str(out / "sweep.sbatch")], capture_output=True, text=True,
                         check=True).stdout.strip().split(";")[0]
    slurm_jobs.append(job)
    run = while_queued(job, lambda: training_run(tmp_path / "r"), "training")
    # What #SBATCH --signal=B:USR1@120 does before the time limit: USR1 to the batch script.
    subprocess.run(["scancel", "--batch", "--signal=USR1", f"{job}_1"], check=True)
    wait_until(lambda: meta(run).get("status") == "interrupted", SAFETY_S, "the checkpoint on the signal")
    stopped_at = meta(run)["checkpoint_step"]
    before = steps_logged(run)
    wait_until(lambda: any("PENDING" in ln for ln in squeue(job)), SAFETY_S, "the requeue")
    subprocess.run(["scontrol", "update", f"JobId={job}_1", START_SOON], check=False, capture_output=True)
    while_queued(job, lambda: resumed_and_training_past(run, stopped_at), "the requeued task trained on", poll=1)
    assert meta(run)["resumed_from"] == [stopped_at] and 0 < stopped_at < NEVER
    steps = steps_logged(run)
    assert steps[: len(before)] == before and min(steps[len(before):]) > stopped_at  # one history, continued


def test_the_slurm_launcher_runs_one_point_over_several_processes(tmp_path):
    with cancelled_after(tmp_path, SAFETY_S, "the two-process task"):
        r = runner.invoke(app, ["sweep", "sweep=smoke", "scheme=rope", "seed=0", "train.grad_accum=2",
                                f"results_dir={tmp_path}", "--launcher", "slurm", "--wait", "sweep.slurm.poll_s=1",
                                "sweep.slurm.ddp_processes=2", "sweep.slurm.cpus_per_task=1"])
    assert r.exit_code == 0 and "1 trained" in r.output, r.output
    (run,) = (tmp_path / "runs").iterdir()
    assert meta(run)["status"] == "done" and meta(run)["processes"] == 2  # two Slurm tasks, one DDP run


def test_a_task_killed_from_outside_is_recorded_as_failed(tmp_path):
    """The task trains NEVER steps, so it is still training when cancelled, however fast the machine. The thread
    cancels it as soon as it has logged a step, and in any case (even if it never trains) so that --wait returns."""
    seen = {}

    def cancel_once_training():
        try:
            seen["run"] = wait_until(lambda: training_run(tmp_path), SAFETY_S, "training")
        except AssertionError as e:
            seen["error"] = e
        finally:
            cancel(*jobs_under(tmp_path))

    killer = threading.Thread(target=cancel_once_training, daemon=True)
    killer.start()
    r = runner.invoke(app, ["sweep", "sweep=smoke", "scheme=alibi", "seed=0", f"train.steps={NEVER}",
                            f"results_dir={tmp_path}", "--launcher", "slurm", "--wait", "sweep.slurm.poll_s=1"])
    killer.join(SAFETY_S)
    assert "error" not in seen, seen["error"]
    assert r.exit_code == 1 and "1 failed" in r.output, r.output
    (run,) = (tmp_path / "runs").iterdir()
    assert meta(run)["status"] == "failed" and "ended without finishing the run" in meta(run)["error"]
