"""`pe-bench runs`: every run of a results directory at a glance, one line each — name, status, step of steps,
wall time, last validation loss and numerics — read from each run's meta.json, config.yaml and train.csv."""

from __future__ import annotations

from collections import Counter
from typing import Any

import typer

from pe_bench.cli.app import app, friendly, say
from pe_bench.cli.output import find_runs
from pe_bench.config import ConfigError
from pe_bench.runs import State

STATUSES = tuple(s.value for s in State)
STALE = ("stale: meta.json says running but no process holds the run (it was killed); the same `pe-bench train` "
         "command resumes it from its checkpoint")


@app.command()
@friendly
def runs(paths: list[str] | None = typer.Argument(None, help="Results directories (with runs/), run directories "
                                                  "or globs (default: results)."),
         status: list[str] | None = typer.Option(None, help=f"Keep only runs with this status (repeatable): "
                                                 f"{', '.join(STATUSES)}."),
         scheme: list[str] | None = typer.Option(None, help="Keep only runs of these schemes (repeatable)."),
         task: list[str] | None = typer.Option(None, help="Keep only runs of these tasks (repeatable).")) -> None:
    """One line per run: name, status, step/steps, wall time, last validation loss, numerics (torch, device,
    threads). Unreadable run directories are listed as such, with the reason."""
    bad = [s for s in status or [] if s not in STATUSES]
    if bad:
        raise ConfigError(f"--status {bad[0]!r} is not one of: {', '.join(STATUSES)}")
    from pe_bench.runs import Run

    rows = [_row(Run(p)) for p in find_runs(paths or ["results"])]
    rows = [r for r in rows if (not status or r["status"] in status) and (not scheme or r["scheme"] in scheme)
            and (not task or r["task"] in task)]
    if not rows:
        raise ConfigError("no run matches the filters; loosen --status/--scheme/--task")
    columns = ("run", "status", "step", "wall", "val loss", "numerics")
    width = {c: max(len(c), *(len(r[c]) for r in rows)) for c in columns[:-1]}
    typer.echo("  ".join(c.ljust(width.get(c, 0)) for c in columns).rstrip())
    for r in rows:
        typer.echo("  ".join(r[c].ljust(width.get(c, 0)) for c in columns).rstrip())
    counts = Counter(r["status"] for r in rows)
    say(f"{len(rows)} runs: " + ", ".join(f"{counts[s]} {s}" for s in STATUSES if counts[s]))
    if counts[State.STALE]:
        say(STALE)


def _row(run) -> dict[str, str]:
    """A run's line; an unreadable meta.json or config.yaml makes a line that says so and why."""
    from pe_bench.runs import RunFileError, State, state_of
    from pe_bench.runs.state import RunState

    now = state_of(run)
    try:
        cfg = run.load_config() if now.state != State.UNREADABLE else None
        step, elapsed, val = _progress(run)
    except RunFileError as e:
        now, cfg = RunState(State.UNREADABLE, str(e)), None
    if cfg is None:
        return {"run": run.path.name, "status": str(State.UNREADABLE), "step": "", "wall": "", "val loss": "",
                "numerics": now.detail, "scheme": "", "task": ""}
    meta, steps = now.meta, cfg.train.steps
    done = now.state == State.DONE
    return {"run": run.path.name, "status": str(now.state), "step": f"{steps if done else step}/{steps}",
            "wall": _duration(meta.wall if done else elapsed), "val loss": _loss(meta.final_val_loss if done else val),
            "numerics": meta.numerics or "", "scheme": cfg.scheme["name"], "task": cfg.task.name}


def _progress(run) -> tuple[int, float | None, float | None]:
    """(last step, its elapsed seconds, last validation loss) from train.csv: (0, None, None) before its first
    line. A line that cannot be parsed is a RunFileError naming it, unless it is the last line of a run still being
    written (a line half written)."""
    from pe_bench.runs import RunFileError, read_csv

    rows = read_csv(run.train_csv)
    step, elapsed, val = 0, None, None
    for i, r in enumerate(rows, 2):
        try:
            step, elapsed = int(r["step"]), float(r["elapsed_s"])
            val = float(r["val_loss"]) if r.get("val_loss") else val
        except (KeyError, TypeError, ValueError):
            if i == len(rows) + 1 and run.is_locked():
                break
            raise RunFileError(f"{run.train_csv} line {i} is malformed (truncated or edited)") from None
    return step, elapsed, val


def _duration(seconds: Any) -> str:
    from pe_bench.progress import duration

    return duration(float(seconds)) if isinstance(seconds, (int, float)) else ""


def _loss(value: Any) -> str:
    return f"{value:.4f}" if isinstance(value, (int, float)) else ""
