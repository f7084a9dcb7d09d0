"""Where a sweep's points run, behind one interface (``Launcher.launch``): here one after another (``Sequential``),
here as N processes (``Parallel``), as one Slurm job array through submitit (``SlurmArray``), or as a plain sbatch
script for clusters without Python access to the scheduler (``SbatchScript``). ``for_sweep`` picks one from the
sweep config and the command line's flags; the CLI only prints what they say."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pe_bench.config import Config, ConfigError, hydra_quoted
from pe_bench.runs import Run, RunBusy, Status, atomic_write_text
from pe_bench.sweep import Point, SlurmLauncher, SweepConfig, squeue_tasks

Say = Callable[[str], None]


class StoppedWaiting(Exception):
    """Ctrl-C while waiting on a Slurm job array: the array keeps running; nothing is reported."""


class Launcher:
    """Runs (or hands over) the points still to do. ``launch`` returns each point's outcome by label — "trained",
    "failed", "busy" or "stopped" — or None when the points were handed to a scheduler that runs them later (the
    sweep then stops: its report is written by the next `pe-bench sweep` or `pe-bench report`)."""

    trains_here = True  # False: the points run elsewhere, later (a script to submit)

    def launch(self, todo: list[Point], say: Say) -> dict[str, str] | None:
        raise NotImplementedError


@dataclass
class Sequential(Launcher):
    progress: bool = True

    def launch(self, todo: list[Point], say: Say) -> dict[str, str]:
        from pe_bench.distributed import stop_on_signals

        stop_on_signals()  # SIGTERM/SIGUSR1: the current point checkpoints at its next step, the sweep stops
        return run_sequential(todo, say, self.progress)


@dataclass
class Parallel(Launcher):
    parallel: int
    threads: int | None = None

    def launch(self, todo: list[Point], say: Say) -> dict[str, str]:
        from pe_bench.distributed import stop_on_signals

        stop_on_signals()  # SIGTERM/SIGUSR1: passed on to every point running, which checkpoints; the sweep stops
        return run_parallel(todo, self.parallel, self.threads, say)


@dataclass
class SlurmArray(Launcher):
    sc: SlurmLauncher
    folder: Path | None
    name: str
    again: str  # the command that collects the results later

    def launch(self, todo: list[Point], say: Say) -> dict[str, str] | None:
        folder = self.folder or Path(todo[0].cfg.results_dir) / "slurm"
        job = submit_slurm(todo, self.sc, folder, self.name)
        say(f"submitted job array {job}: {len(todo)} tasks, at most {self.sc.array_parallelism} at once "
            f"(logs: {folder / job}/)")
        if not self.sc.wait:
            say(f"follow it with: squeue -j {job}   ·   when it is done: {self.again} (skips what finished, writes "
                f"the report) or pe-bench report {todo[0].cfg.results_dir}")
            return None
        try:
            wait_slurm(todo, job, self.sc.poll_s, say)
        except KeyboardInterrupt:
            say(f"stopped waiting; job array {job} keeps running (squeue -j {job}; scancel {job} stops it)")
            raise StoppedWaiting(job) from None
        return {p.label: "trained" if p.run.status == "done" else "failed" for p in todo}


@dataclass
class SbatchScript(Launcher):
    sc: SlurmLauncher
    out: Path
    name: str
    skipped: int = 0  # finished or running points, named in the message
    trains_here = False

    def launch(self, todo: list[Point], say: Say) -> None:
        jobs, script = emit_sbatch(todo, self.sc, self.out, self.name)
        say(f"wrote {jobs} ({len(todo)} runs; {self.skipped} finished or running left out) and {script}\n"
            f"submit with: sbatch {script}")
        return None


def for_sweep(sw: SweepConfig, again: str, emit_sbatch_dir: Path | None = None, progress: bool = True) -> Launcher:
    """The launcher a sweep config (with the command line's flags applied) asks for."""
    if emit_sbatch_dir is not None:
        return SbatchScript(sw.slurm, emit_sbatch_dir, sw.name)
    if sw.launcher == "slurm":
        return SlurmArray(sw.slurm, Path(sw.slurm.folder) if sw.slurm.folder else None, sw.name, again)
    if sw.local.parallel > 1:
        return Parallel(sw.local.parallel, sw.local.threads)
    return Sequential(progress)


_SETTLED = (Status.FAILED, Status.DIVERGED, Status.DONE)  # a process's exit code does not overrule these


def run_point(cfg: Config, progress: bool = False) -> str:
    """Train and evaluate one point in this process: "trained", "busy" (another process holds it), "stopped"
    (signal/Ctrl-C, checkpoint saved) or "failed" — the error is then in the run's meta.json either way."""
    from pe_bench.distributed import StopRequested
    from pe_bench.experiment import record_failure, run_one

    run = Run.for_config(cfg)
    try:
        run_one(cfg, progress=progress)
        return "trained"
    except RunBusy:
        return "busy"
    except (KeyboardInterrupt, StopRequested):
        raise
    except Exception as e:  # noqa: BLE001 - a failing point never stops the others
        if run.meta().error != f"{type(e).__name__}: {e}":  # failed before run_one could record it
            run.create(cfg)
            record_failure(run, e)
        return "failed"


# ---------------------------------------------------------------------------------------------------------------
# Local
# ---------------------------------------------------------------------------------------------------------------
def run_sequential(todo: list[Point], say: Say, progress: bool) -> dict[str, str]:
    """The points to do, in this process, in order. Ctrl-C/SIGTERM stop the sweep after saving a checkpoint."""
    results: dict[str, str] = {}
    for i, p in enumerate(todo, 1):
        say(f"[{i}/{len(todo)}] {p.label}: {p.detail} → {p.run.path}")
        results[p.label] = status = run_point(p.cfg, progress)
        if status == "failed":
            say(f"[{i}/{len(todo)}] {p.label}: failed: {p.run.meta().error}")
    return results


def run_parallel(todo: list[Point], parallel: int, threads: int | None, say: Say) -> dict[str, str]:
    """The points to do, at most `parallel` `pe-bench train` processes at once, each logging to its run's
    train.log. A stop request (SIGTERM, SIGUSR1) starts no further point and is passed on to the running ones, which
    save their checkpoints; then StopRequested, as a sequential sweep's."""
    from pe_bench.distributed import StopRequested, stop_requested

    threads = threads or max(1, (os.cpu_count() or 1) // parallel)
    pending, active, results = list(todo), {}, {}
    stopping = False
    try:
        while pending or active:
            if stop_requested() and not stopping:
                stopping, pending = True, []
                for _, proc, _ in active.values():
                    proc.send_signal(signal.SIGTERM)
            while pending and len(active) < parallel:
                p = pending.pop(0)
                p.run.path.mkdir(parents=True, exist_ok=True)
                log = (p.run.path / "train.log").open("ab")
                cmd = [sys.executable, "-m", "pe_bench", "train", *p.overrides,
                       f"results_dir={hydra_quoted(p.cfg.results_dir)}", f"cache_dir={hydra_quoted(p.cfg.cache_dir)}",
                       f"train.threads={threads}", "--no-progress"]
                active[p.label] = (p, subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT), log)
                say(f"started {p.label} ({p.detail}) → {p.run.path}/train.log")
            time.sleep(0.2)
            for label, (p, proc, log) in list(active.items()):
                if proc.poll() is None:
                    continue
                log.close()
                del active[label]
                results[label] = {0: "trained", 3: "stopped", 4: "busy"}.get(proc.returncode, "failed")
                if results[label] == "failed" and p.run.meta().status not in _SETTLED:
                    p.run.update_meta(status=Status.FAILED, error=f"exit code {proc.returncode}; see train.log")
                detail = f": {p.run.meta().error}" if results[label] == "failed" else ""
                say(f"{results[label]} {label}{detail}")
        if stopping:
            raise StopRequested("stopped: the points running saved their checkpoints")
    except KeyboardInterrupt:
        for _, proc, _ in active.values():  # they got the Ctrl-C too: let them save their checkpoints
            proc.wait()
        raise
    return results


# ---------------------------------------------------------------------------------------------------------------
# Slurm via submitit: one job array
# ---------------------------------------------------------------------------------------------------------------
class SlurmTask:
    """The function each array task runs. On the pre-timeout (or preemption) signal it stops training at a step
    boundary, saves the checkpoint, and lets submitit requeue the task; the requeued task resumes from there."""

    def __call__(self, cfg: Config) -> str:
        import submitit
        import torch

        from pe_bench.distributed import StopRequested, request_stop

        env = submitit.JobEnvironment()
        if env.num_tasks > 1:  # one run over several processes (DDP): RANK, WORLD_SIZE, MASTER_ADDR, ...
            submitit.helpers.TorchDistributedEnvironment().export(set_cuda_visible_devices=False)
        if not cfg.train.threads and os.environ.get("SLURM_CPUS_PER_TASK"):
            torch.set_num_threads(int(os.environ["SLURM_CPUS_PER_TASK"]))
        requeue_signal = signal.Signals[f"SIG{os.environ.get('SUBMITIT_PREEMPT_SIGNAL', 'USR2')}"]
        submitit_handler = signal.getsignal(requeue_signal)
        signal.signal(requeue_signal, request_stop)
        try:
            return run_point(cfg)
        except StopRequested:
            if env.global_rank == 0 and callable(submitit_handler):
                submitit_handler(requeue_signal, None)  # checkpoint() below, `scontrol requeue`, exit
            return "stopped"

    def checkpoint(self, cfg: Config):  # called by submitit's signal handler: resubmit the same point
        import submitit

        return submitit.helpers.DelayedSubmission(self, cfg)


def slurm_available() -> str | None:
    """None if a Slurm controller answers here, else why not (one line)."""
    import shutil

    if shutil.which("sbatch") is None:
        return "no Slurm here (sbatch not found); on Debian as root: bash scripts/slurm_up.sh"
    try:
        p = subprocess.run(["sinfo", "-h", "-o", "%a"], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError) as e:
        return f"sinfo failed: {e}"
    if p.returncode != 0 or "up" not in p.stdout:
        return f"the Slurm controller does not answer (sinfo: {(p.stderr or p.stdout).strip()[:120]})"
    return None


def submit_slurm(points: list[Point], sc: SlurmLauncher, folder: Path, name: str) -> str:
    """Submit the points to do as ONE job array; record 'queued' with the task id in each run. Returns the array
    job id."""
    try:
        import submitit
    except ImportError:
        raise ConfigError("the slurm launcher needs submitit: pip install 'pe-bench[slurm]' (or use "
                          "--emit-sbatch DIR for a plain sbatch script)") from None
    why = slurm_available()
    if why:
        raise ConfigError(f"sweep.launcher=slurm: {why}")
    ex = submitit.SlurmExecutor(folder=str(folder / "%j"), max_num_timeout=sc.max_requeues)
    params = {"job_name": f"pe-bench-{name}", "time": sc.time_min, "cpus_per_task": sc.cpus_per_task,
              "mem": f"{int(sc.mem_gb * 1024)}MB", "array_parallelism": sc.array_parallelism,
              "signal_delay_s": sc.signal_delay_s, "ntasks_per_node": sc.ddp_processes, "nodes": 1,
              "setup": list(sc.setup), "partition": sc.partition, "account": sc.account, "qos": sc.qos,
              "constraint": sc.constraint, "gpus_per_node": sc.gpus_per_node or None,
              "additional_parameters": dict(sc.additional) or None}
    ex.update_parameters(**{k: v for k, v in params.items() if v is not None})
    jobs = ex.map_array(SlurmTask(), [absolute(p.cfg) for p in points])
    for p, job in zip(points, jobs):
        p.run.create(p.cfg)
        p.run.update_meta(status=Status.QUEUED, slurm_job=job.job_id, error=None,
                          slurm_log=str(job.paths.stdout).replace("%j", str(job.job_id)))
    return jobs[0].job_id.split("_")[0]


def absolute(cfg: Config) -> Config:
    """The config with absolute results/cache paths: a batch job need not start where the sweep was launched."""
    from dataclasses import replace

    return replace(cfg, results_dir=str(Path(cfg.results_dir).resolve()),
                   cache_dir=str(Path(cfg.cache_dir).expanduser().resolve()))


def wait_slurm(points: list[Point], array_id: str, poll_s: float, say: Say) -> None:
    """Until Slurm holds no task of the array; prints the counts when they change."""

    last, last_left = None, -1
    while True:
        left = squeue_tasks(array_id)
        done = sum(p.run.is_done() for p in points)
        failed = sum(p.run.status == Status.FAILED for p in points)
        now = (left, done, failed)
        if now != last:
            say(f"job {array_id}: {done}/{len(points)} done, {failed} failed, {left} in the queue")
            last = now
        if left == 0 and last_left == 0:  # seen empty twice: not a transient answer
            break
        last_left = left if left is not None else last_left
        time.sleep(poll_s)
    for p in points:  # a task killed from outside (out of memory, over its limit, scancel) could not say so itself
        meta = p.run.meta()
        if meta.status in (Status.QUEUED, Status.RUNNING):
            p.run.update_meta(status=Status.FAILED, error=f"Slurm task {meta.slurm_job} ended without finishing "
                              f"the run (killed: out of memory, time limit, scancel?); see {meta.slurm_log}")


# ---------------------------------------------------------------------------------------------------------------
# A plain sbatch array script (no Python access to the scheduler needed)
# ---------------------------------------------------------------------------------------------------------------
def emit_sbatch(points: list[Point], sc: SlurmLauncher, out: Path, name: str) -> tuple[Path, Path]:
    """out/jobs.txt (one shell-quoted override line per point) and out/sweep.sbatch (the array script)."""
    out.mkdir(parents=True, exist_ok=True)
    lines = []
    for p in points:
        cfg = absolute(p.cfg)
        words = [o for o in p.overrides if o.partition("=")[0] != "results_dir"] + [f"results_dir={cfg.results_dir}"]
        lines.append(" ".join(shlex.quote(w) for w in words))
    jobs = out / "jobs.txt"
    atomic_write_text(jobs, "\n".join(lines) + "\n")
    script = out / "sweep.sbatch"
    atomic_write_text(script, sbatch_script(name, len(points), sc, jobs.resolve(), (out / "logs").resolve()))
    script.chmod(0o755)
    (out / "logs").mkdir(exist_ok=True)
    return jobs, script


def sbatch_script(name: str, n: int, sc: SlurmLauncher, jobs: Path, logs: Path) -> str:
    opts = {"job-name": f"pe-bench-{name}", "array": f"1-{n}%{sc.array_parallelism}", "time": str(sc.time_min),
            "nodes": "1", "ntasks-per-node": "1", "cpus-per-task": str(sc.cpus_per_task),
            "mem": f"{int(sc.mem_gb * 1024)}M", "output": f"{logs}/%A_%a.out", "open-mode": "append",
            "requeue": None, "signal": f"B:USR1@{sc.signal_delay_s}"}
    for key, value in (("partition", sc.partition), ("account", sc.account), ("qos", sc.qos),
                       ("constraint", sc.constraint),
                       ("gpus-per-node", str(sc.gpus_per_node) if sc.gpus_per_node else None)):
        if value:
            opts[key] = value
    opts.update({k.replace("_", "-"): str(v) for k, v in sc.additional.items()})
    header = "\n".join(f"#SBATCH --{k}" + (f"={v}" if v is not None else "") for k, v in opts.items())
    if sc.ddp_processes > 1:
        launch = (f'"$PY" -m torch.distributed.run --standalone --nproc_per_node={sc.ddp_processes} '
                  '-m pe_bench train "$@" --no-progress &')
    else:
        launch = '"$PY" -m pe_bench train "$@" train.threads="${SLURM_CPUS_PER_TASK:-1}" --no-progress &'
    setup = "\n".join(sc.setup)
    return f"""#!/bin/bash
# pe-bench sweep '{name}': {n} runs as one Slurm job array, one line of jobs.txt per task.
#   submit:  sbatch {jobs.parent}/sweep.sbatch
#   follow:  squeue --me   and   tail -f {logs}/<jobid>_<task>.out
#   results: pe-bench report <results_dir>   (finished runs are skipped if the array is submitted again)
# signal_delay_s before the time limit Slurm sends USR1 to this script; pe-bench stops at the next training step
# with a checkpoint, and the task is requeued: it resumes from the checkpoint.
{header}
set -uo pipefail
{setup}
PY="${{PE_BENCH_PYTHON:-{sys.executable}}}"   # a Python with pe-bench installed
LINE="$(sed -n "${{SLURM_ARRAY_TASK_ID}}p" {jobs})"
echo "$(date -Is) task ${{SLURM_ARRAY_TASK_ID}} on $(hostname): pe-bench train $LINE"
eval "set -- $LINE"
{launch}
pid=$!
# On the signal pe-bench stops with a checkpoint (exit 3; torchrun exits 1) and the task is requeued; a run that
# finished before it could stop (exit 0) is not.
trap 'kill -TERM "$pid"; wait "$pid"; rc=$?; [ "$rc" -ne 0 ] && scontrol requeue "${{SLURM_ARRAY_JOB_ID}}_${{SLURM_ARRAY_TASK_ID}}" && rc=0; exit "$rc"' USR1
wait "$pid"
"""
