"""The one answer to "what state is this run in?", from its meta.json, its files and its lock."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from pe_bench.runs.directory import Run
from pe_bench.runs.meta import RunFileError, RunMeta, Status


class State(StrEnum):
    """A run as it is now. Unlike Status (what meta.json says), it accounts for the lock, the Slurm queue and the
    files: a run meta.json calls running that no process holds was killed (STALE)."""

    DONE = "done"  # finished, with its evaluation rows
    RUNNING = "running"  # a process holds its lock
    STALE = "stale"  # meta.json says running, queued or done, but nothing holds it and it is not finished
    INTERRUPTED = "interrupted"  # stopped by a signal at a checkpoint
    FAILED = "failed"
    DIVERGED = "diverged"
    UNREADABLE = "unreadable"  # meta.json or config.yaml cannot be read: a person must look (the detail says why)
    QUEUED = "queued"  # a live Slurm job holds it
    NEW = "new"  # nothing recorded yet

@dataclass
class RunState:
    state: State
    detail: str = ""
    meta: RunMeta = field(default_factory=RunMeta)
    checkpoint: bool = False  # a checkpoint is there: training goes on from it rather than from the start


def state_of(run: Run, slurm_alive: Callable[[str], bool] | None = None) -> RunState:
    """The state of ``run``. ``slurm_alive(job)``: whether Slurm still holds a job (None: the queue is not asked, a
    queued run is as meta.json says)."""
    try:
        meta = run.meta()
        if run.config.exists():
            run.load_config()
    except RunFileError as e:
        return RunState(State.UNREADABLE, str(e))
    ckpt = run.checkpoint.exists()
    at = f" (checkpoint at step {meta.checkpoint_step})" if ckpt and meta.checkpoint_step is not None else ""
    if meta.status == Status.DIVERGED:
        return RunState(State.DIVERGED, f"diverged at step {meta.diverged_step}", meta, ckpt)
    if run.is_done():
        return RunState(State.DONE, "finished", meta, ckpt)
    if meta.slurm_job and slurm_alive is not None and slurm_alive(meta.slurm_job):
        return RunState(State.QUEUED, f"in Slurm job {meta.slurm_job}", meta, ckpt)
    if run.is_locked():
        return RunState(State.RUNNING, "being trained by another process", meta, ckpt)
    if meta.status == Status.QUEUED and slurm_alive is None:
        return RunState(State.QUEUED, f"handed to Slurm job {meta.slurm_job}", meta, ckpt)
    if meta.status in (Status.RUNNING, Status.QUEUED, Status.DONE):
        said = "done, but its evaluation rows are missing" if meta.status == Status.DONE else str(meta.status)
        return RunState(State.STALE, f"meta.json says {said} but no process holds it (killed){at}", meta, ckpt)
    if meta.status == Status.INTERRUPTED:
        return RunState(State.INTERRUPTED, f"interrupted{at}", meta, ckpt)
    if meta.status == Status.FAILED:
        return RunState(State.FAILED, f"failed ({meta.error or '?'}){at}", meta, ckpt)
    return RunState(State.NEW, f"not trained yet{at}", meta, ckpt)
