"""`pe-bench sweep`: every point of a sweep trained (here, in parallel processes or as a Slurm array), then its
report."""

from __future__ import annotations

import time
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from pe_bench.cli.app import app, console, friendly, presets_help, say, set_verbose, verbose_option, warn
from pe_bench.cli.output import print_tables, report_into, report_tasks, write_pages, write_report
from pe_bench.config import ConfigError


SWEEP_HELP = ("sweep=NAME (configs/sweep/NAME.yaml; default: default), sweep.KEY=VALUE to change it, and run "
              "overrides; comma lists are axes: scheme=rope,alibi seed=0,1,2 train.seq_len=64,128")


@app.command(epilog=presets_help())
@friendly
def sweep(overrides: list[str] | None = typer.Argument(None, metavar="KEY=VALUE", help=SWEEP_HELP),
          dry_run: bool = typer.Option(False, "--dry-run", help="List the points and what would be skipped; run "
                                       "nothing."),
          launcher: str | None = typer.Option(None, help="local or slurm (default: the sweep config's)."),
          parallel: int | None = typer.Option(None, help="local: this many `pe-bench train` processes at once."),
          wait: bool | None = typer.Option(None, help="slurm: block until the array is done, then report."),
          emit_sbatch: Path | None = typer.Option(None, "--emit-sbatch", metavar="DIR",
                                                  help="Write DIR/jobs.txt and DIR/sweep.sbatch (a plain Slurm "
                                                  "array script) instead of running."),
          out: Path | None = typer.Option(None, help="Report directory (default: <results_dir>/<sweep name>)."),
          evaluate: bool = typer.Option(True, "--eval/--no-eval", help="Evaluate points finished before at this "
                                        "sweep's settings where their rows are missing (--no-eval: the report "
                                        "lists them instead)."),
          progress: bool = typer.Option(True, help="Show progress bars."),
          wide: bool = typer.Option(False, "--wide", help="Print the report's tables with their 95% intervals."),
          verbose: bool = verbose_option()) -> None:
    """Train and evaluate every point of a sweep, then write its report (tables, long CSV, plots). The default
    sweep is every registered scheme × 3 seeds. Finished points are skipped; interrupted ones resume from their
    checkpoint; a failing point is recorded in its run directory and never stops the others."""
    from pe_bench import launchers
    from pe_bench.sweep import check_report_dir, expand, plan, report_dir

    set_verbose(verbose)
    sw, run_keys = _load(overrides or [], launcher, parallel, wait, out)
    command = f"pe-bench sweep {' '.join(overrides or [])}".strip()
    run_with = launchers.for_sweep(sw, command, emit_sbatch, progress)
    t0 = time.perf_counter()
    points = plan(expand(sw, run_keys))
    if sw.launcher == "local":  # a Slurm task resolves its own device
        from pe_bench.device import check_compile

        for p in points:
            check_compile(p.cfg.train)  # what every point's training would refuse, before any run directory exists
    check_report_dir(sw, points, _committed_runs(report_dir(sw, points)))
    if dry_run:
        say(f"runs go to {points[0].run.path.parent}, the report to {report_dir(sw, points)}")
    results = _run_stage(points, sw, sw.name, run_with, dry_run)
    if dry_run and sw.extension is not None:
        _dry_run_finetunes(points, sw, run_with)
    if results is None:  # a dry run, or handed to a scheduler: the next `pe-bench sweep` (or `pe-bench report`) goes on
        return
    if sw.extension is not None:
        staged = _finetune_stage(points, results, sw, run_with)
        if staged is None:
            return
        points, results = staged
    from pe_bench.sweep import evaluate_finished

    unevaluated = evaluate_finished(points, say) if evaluate and run_with.trains_here else []
    _finish_sweep(points, results, report_dir(sw, points), command, time.perf_counter() - t0, wide, unevaluated)


def _load(overrides: list[str], launcher: str | None, parallel: int | None, wait: bool | None, out: Path | None):
    """The sweep config with the command line's options applied, and the run overrides; ConfigError on bad ones."""
    from pe_bench.sweep import load_sweep, split_overrides

    name, sweep_keys, run_keys = split_overrides(overrides)
    sw = load_sweep(name, sweep_keys)
    sw.launcher = launcher or sw.launcher
    sw.local.parallel = parallel or sw.local.parallel
    sw.slurm.wait = sw.slurm.wait if wait is None else wait
    sw.out = str(out) if out else sw.out
    if sw.launcher not in ("local", "slurm"):
        raise ConfigError(f"--launcher {sw.launcher!r} is not one of: local, slurm")
    if parallel is not None and parallel < 1:
        raise ConfigError(f"--parallel {parallel}: give at least 1 (the number of processes at once)")
    return sw, run_keys


def _dry_run_finetunes(points, sw, run_with) -> None:
    """A dry run's plan of the fine-tunes of the parents that are finished already."""
    from pe_bench.sweep import finetune_points

    children = finetune_points(sw, [p for p in points if p.state == "done"])
    if children:
        _run_stage(children, sw, f"{sw.name}: fine-tuning", run_with, True)
    if len(children) < len(points) * sum(n > 0 for n in sw.extension.steps) * len(sw.extension.methods):
        say("the fine-tunes of unfinished parents are planned once their parents are done")


def _finetune_stage(points, results: dict[str, str], sw, run_with):
    """The fine-tuning stage, from the parents that are finished: every point and result so far, or None when the
    fine-tunes were handed to a scheduler."""
    from pe_bench.sweep import evaluate_baselines, finetune_points, inspect

    parents = [p for p in map(inspect, points) if p.state == "done"]
    if len(parents) < len(points):
        warn(f"{len(points) - len(parents)} of {len(points)} parents are not finished: their fine-tunes wait for "
             "them (run the same command again once they are)")
    if run_with.trains_here:
        evaluate_baselines(sw, parents, say)
    children = finetune_points(sw, parents)
    more = _run_stage(children, sw, f"{sw.name}: fine-tuning", run_with, False) if children else {}
    if more is None:
        return None
    return points + children, {**results, **more}


def _run_stage(points, sw, name: str, run_with, dry_run: bool) -> dict[str, str] | None:
    """Plan, estimate and launch the points to do; their results, or None when nothing more happens here (a dry
    run, a script emitted, an array handed to Slurm)."""
    from pe_bench import launchers
    from pe_bench.sweep import TODO, check_data, cpu_kernels_apart

    _print_plan(points, name)
    _print_estimate(points, sw)
    if run_with.trains_here and (apart := cpu_kernels_apart(points)):
        warn(apart)
    if dry_run:
        return None
    todo = [p for p in points if p.state in TODO]
    if not todo:
        say("nothing to emit: every point has finished or is running elsewhere" if not run_with.trains_here
            else "nothing to do: every point has finished")
        return {} if run_with.trains_here else None
    if run_with.trains_here:
        check_data(points)  # a too-short evaluation split fails here, before any training
    if isinstance(run_with, launchers.SbatchScript):
        run_with.skipped = len(points) - len(todo)
    try:
        return run_with.launch(todo, say)
    except launchers.StoppedWaiting:  # Ctrl-C while waiting on a Slurm array: the array keeps running
        raise typer.Exit(130) from None


def _print_estimate(points, sw) -> None:
    """How long the points still to do should take, from finished runs of the same shape (or "unknown")."""
    from pe_bench.progress import duration
    from pe_bench.sweep import TODO, estimate

    todo = sum(p.state in TODO for p in points)
    if not todo:
        return
    at_once = sw.local.parallel if sw.launcher == "local" else 1
    seconds, basis = estimate(points, parallel=at_once)
    say(f"{todo} of {len(points)} points to run: " + (f"about {duration(seconds)} ({basis})" if seconds is not None
                                                      else basis))


def _print_plan(points, name: str) -> None:
    from collections import Counter

    table = Table(title=escape(f"sweep {name}: {len(points)} points"), header_style="bold")
    for c in ("#", "point", "state", "run directory"):
        table.add_column(c)
    for i, p in enumerate(points, 1):
        table.add_row(str(i), escape(p.label), escape(p.detail), escape(str(p.run.path)))
    console.print(table)
    words = {"done": "finished (skipped)", "running": "running elsewhere (skipped)",
             "queued": "in a Slurm job (skipped)", "resume": "to resume",
             "retry": "failed before (retried)", "new": "to train", "diverged": "diverged before (not retried)",
             "corrupt": "unreadable (left out)"}
    counts = Counter(p.state for p in points)
    say(", ".join(f"{counts[s]} {w}" for s, w in words.items() if counts[s]))


def _committed_runs(out: Path) -> set[str] | None:
    """The runs of the report committed in ``out`` (None where git tracks nothing there)."""
    from pe_bench.report.files import report_runs
    from pe_bench.runs import git_tracked

    return report_runs(out) if git_tracked(out) else None


def _finish_sweep(points, results: dict[str, str], out: Path, title: str, seconds: float, wide: bool = False,
                  unevaluated: list[str] | None = None) -> None:
    """Summary table of every point, the report of the finished ones, the counts; exit 1 if any point failed.
    A finished point with no row at the sweep's settings is named in the report's left-out lines, never dropped."""
    from pe_bench.report import MODES, collect_positions, collect_runs
    from pe_bench.sweep import BUSY, LEFT

    skipped = sum(p.state == "done" for p in points)  # as planned, before the states are read again
    busy = sum(p.state in BUSY for p in points)
    left = sum(p.state in LEFT for p in points)  # diverged before, or an unreadable run directory: failures
    _print_summary(points, results)
    got = collect_runs([p.run for p in points if p.state == "done" or p.state == "diverged"],
                       keep=_evaluated_here(points), split=points[0].cfg.eval.split if points else None)
    got.perplexity.left_out += _not_in_report(points, got, unevaluated or [])
    with report_into(out) as reported:
        if got.runs["accuracy"]:
            reported += report_tasks(got.accuracy, len(got.runs["accuracy"]), reported.stage, plots=True, title=title)
        runs = got.runs["perplexity"]
        col = got.perplexity if runs else None
        for line in col.left_out if col is not None else []:
            warn(f"left out of the report: {line}")
        if col is not None and not col.df.empty:
            pos = collect_positions(runs, unplotted := [])
            for line in unplotted:
                warn(f"left out of the plots: {line}")
            split = points[0].cfg.eval.split
            print_tables(col, split, wide)
            reported += write_report(col, pos, reported.stage, title, split, MODES, plots=True)
        if reported.written:
            write_pages(reported.stage, title, title, reported)  # a sweep's title is its command
    counts = {k: sum(v == k for v in results.values()) for k in ("trained", "failed", "busy", "stopped")}
    counts["failed"] += left
    say(f"{len(points)} points: {counts['trained']} trained, {skipped} skipped (finished before), "
                  f"{counts['failed']} failed, {counts['busy'] + busy} busy "
                  f"elsewhere, {counts['stopped']} stopped, in {seconds:.0f} s")
    if counts["failed"]:
        raise typer.Exit(1)


def _print_summary(points, results: dict[str, str]) -> None:
    """One line per point: its run, status (as the sweep left it, read again), throughput, wall time, error."""
    from pe_bench.runs import Status
    from pe_bench.sweep import LEFT, inspect

    summary = Table(title="runs", header_style="bold")
    for c in ("run", "status", "train tok/s", "wall s", "error"):
        summary.add_column(c)
    for p in points:
        inspect(p)
        meta = p.meta
        status = results.get(p.label, "skipped" if p.state == "done" else p.state)
        if status == "failed" and meta.status == Status.DIVERGED:
            status = "diverged"
        error = meta.error or p.detail * (p.state in LEFT)
        summary.add_row(escape(p.run.path.name), escape(status), _blank(meta.train_tokens_per_s, ".0f"),
                        _blank(meta.wall, ".1f"), escape(str(error)))
    console.print(summary)


def _blank(value: float | None, spec: str) -> str:
    return "" if value is None else format(value, spec)


def _evaluated_here(points):
    """The report's row filter: this sweep's lengths and evaluation settings only, even if a run was also evaluated
    elsewhere (a fine-tune's budget 0 included: its parent evaluated with the fine-tune's settings)."""
    from pe_bench.config import eval_lengths, run_lengths
    from pe_bench.evaluate.perplexity import budget_label
    from pe_bench.report import MODES

    wanted: dict[str, set[tuple[int, str, str]]] = {}  # run → (length, mode, token budget) this sweep evaluates
    for p in points:
        e = p.cfg.eval
        keys = {(n, m, str(budget_label(e.max_tokens if m == "nonoverlapping" else e.sliding_max_tokens)))
                for n in run_lengths(p.cfg) for m in MODES}
        wanted.setdefault(p.run.path.name, set()).update(keys)
        if p.cfg.finetune.from_run:  # its budget 0: the parent evaluated at the parent's lengths
            of_parent = set(eval_lengths(p.cfg.eval, p.cfg.finetune.original_seq_len))
            wanted.setdefault(Path(p.cfg.finetune.from_run).name, set()).update(
                (n, m, b) for n, m, b in keys if n in of_parent)

    def ours(df):
        return [(int(n), m, str(b)) in wanted.get(r, ()) for r, n, m, b in zip(df["run"], df["L_eval"], df["mode"],
                                                                               df["budget"])]

    return ours


def _not_in_report(points, got, unevaluated: list[str]) -> list[str]:
    """One line per finished point whose run gives no row of this sweep's settings and is not named yet: evaluated
    at other settings only (which: its eval.csv's lengths and budgets)."""
    from pe_bench.runs import read_csv

    shown = set(got.perplexity.df.get("run", ())) | set(got.accuracy.df.get("run", ()))
    named = " ".join(got.left_out)
    lines = list(unevaluated)
    for p in points:
        name = p.run.path.name
        if p.state != "done" or name in shown or name in named or any(line.startswith(name) for line in lines):
            continue
        rows = read_csv(p.run.eval_csv)
        settings = sorted({(int(r["L_eval"]), r.get("budget", "")) for r in rows if r.get("L_eval", "").isdigit()})
        lines.append(f"{name}: evaluated at other settings only (length, token budget: "
                     f"{', '.join(f'{n} {b}'.strip() for n, b in settings) or 'none'}); run the sweep without "
                     "--no-eval, or `pe-bench eval` the run at the sweep's settings")
    return lines
