"""pe-bench command line: train, eval, sweep, schemes. Thin: parse, compose, call."""

from __future__ import annotations

import errno
import functools
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from typer.core import TyperGroup

try:  # recent typer carries its own copy of click, whose exceptions its commands raise
    from typer._click import exceptions as click_errors
except ImportError:  # older typer runs on click itself
    from click import exceptions as click_errors

# Only light modules at import time: help, `schemes`, `--version`, `--cfg` and configuration errors answer without
# importing torch (scripts/bench_cli_startup.py measures it). Commands import what they need.
from pe_bench import __version__, schemes
from pe_bench.config import GROUPS, ConfigError, apply_overrides, preset_names, to_yaml
from pe_bench.finetune import compose_run

# Off a terminal (logs, CI) rich would assume 80 columns and truncate numbers; tables are never cut.
console = Console(highlight=False, width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def say(text: str) -> None:
    """Print plain text: nothing in it is read as rich markup (``pip install 'pe-bench[plots]'`` stays whole)."""
    console.print(text, markup=False, highlight=False, soft_wrap=True)


def warn(text: str) -> None:
    """Plain text on stderr (never markup)."""
    err.print(text, markup=False)


def error(text: str) -> None:
    """``error: <text>`` on stderr, the text never read as markup."""
    err.print(f"[bold red]error:[/] {escape(text)}")


def presets_help() -> str:
    """The config groups and their presets, the sweeps and the schemes, read from configs/ (no imports)."""
    lines = [f"{g + '=':<8} {', '.join(preset_names(g))}" for g in GROUPS]
    lines.append(f"{'sweep=':<8} {', '.join(preset_names('sweep'))}   (pe-bench sweep)")
    return ("\b\nConfig groups and their presets (configs/<group>/<preset>.yaml; `pe-bench schemes` describes the "
            "schemes):\n" + "\n".join(lines) + "\nAny key can be set too: model.n_layers=2 train.seq_len=128 "
            "eval.lengths=[64,1024]; `--cfg` prints the result.")


class OneLineErrors(TyperGroup):
    """Click's usage errors (an unknown option or command, a bad option value, a missing argument) as one
    ``error: ...`` line and exit 2, like every other bad input; ``pe-bench`` alone still shows the help."""

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)
        try:
            code = super().main(*args, standalone_mode=False, **kwargs)  # typer.Exit(n) comes back as n
        except click_errors.NoArgsIsHelpError as e:
            e.show()
            sys.exit(e.exit_code)
        except click_errors.UsageError as e:
            hint = f" (see `{e.ctx.command_path} --help`)" if e.ctx is not None else ""
            error(" ".join(e.format_message().split()) + hint)
            sys.exit(2)
        except click_errors.ClickException as e:
            error(" ".join(e.format_message().split()))
            sys.exit(e.exit_code)
        except typer.Abort:  # typer's own class (its copy of click has none in click_errors)
            warn("aborted")
            sys.exit(1)
        sys.exit(code if isinstance(code, int) else 0)


app = typer.Typer(cls=OneLineErrors, add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="Train small transformers at length L with a positional scheme; evaluate at L, 2L, 4L, 8L.",
                  epilog=presets_help())

OVERRIDES_HELP = "Hydra overrides, e.g. scheme=rope model.n_layers=2 train=smoke eval.lengths=[64,128]"


def _version(value: bool) -> None:
    if value:
        typer.echo(f"pe-bench {__version__}")
        raise typer.Exit()


@app.callback()
def main_options(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                              help="Print pe-bench's version and exit.")) -> None:
    """Train small transformers at length L with a positional scheme; evaluate at L, 2L, 4L, 8L."""


def _raised(e: BaseException, module: str, name: str) -> bool:
    """isinstance(e, module.name) without importing the module: an exception of a class from a module that was
    never imported cannot have been raised."""
    mod = sys.modules.get(module)
    return mod is not None and isinstance(e, getattr(mod, name))


def friendly(fn: Callable) -> Callable:
    """Bad input → one line and exit 2; a crash → one line and exit 1 (PE_BENCH_DEBUG=1 shows the traceback)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except typer.Exit:
            raise
        except KeyboardInterrupt:
            warn("interrupted: run the same command again to resume from the last checkpoint")
            raise typer.Exit(130) from None
        except Exception as e:
            if isinstance(e, ConfigError) or _raised(e, "pe_bench.data", "DataError"):
                error(str(e))
                raise typer.Exit(2) from None
            if _raised(e, "pe_bench.runs", "RunBusy"):
                error(f"{e}: let it finish, or stop that process first")
                raise typer.Exit(4) from None
            if _raised(e, "pe_bench.distributed", "StopRequested"):
                warn(f"{e} (on a signal); run the same command again to resume")
                raise typer.Exit(3) from None
            if _raised(e, "pe_bench.train", "Diverged"):
                error(str(e))
                raise typer.Exit(1) from None
            if isinstance(e, OSError) and e.errno == errno.ENOSPC:
                where = f" writing {e.filename}" if e.filename else ""
                error(f"No space left on device{where}: free some space and run the same command again (pe-bench "
                      "replaces its files whole: what was there before is intact, a run resumes from its checkpoint)")
                raise typer.Exit(1) from None
            if os.environ.get("PE_BENCH_DEBUG"):
                raise
            error(f"{type(e).__name__}: {e} (PE_BENCH_DEBUG=1 shows the traceback)")
            raise typer.Exit(1) from None

    return wrapper


def _print_cfg(cfg) -> None:
    """The resolved config as YAML (valid YAML: the run directory is a comment)."""
    from pe_bench.runs import run_dir_for

    typer.echo(to_yaml(cfg).rstrip())
    typer.echo(f"# run directory: {run_dir_for(cfg)}")


def _print_tables(df, split: str) -> None:
    """df: a DataFrame of eval rows or a report.Collected (with per-window losses: intervals and marks)."""
    from pe_bench.report import comparison, rich_table

    for mode in ("nonoverlapping", "sliding"):
        t = comparison(df, mode, split)
        if not t.empty:
            console.print(rich_table(t, escape(f"perplexity on {split} — {mode} (columns: eval length)")))


def _print_accuracy_tables(acc) -> None:
    """acc: a task_report.Accuracy — exact-match tables, one per task."""
    from pe_bench.task_report import accuracy_table

    for task in sorted(acc.df["task"].unique()):
        t = accuracy_table(acc.df, task)
        table = Table(title=escape(f"{task}: exact match in % on held-out examples (columns: eval length)"),
                      header_style="bold")
        for c in ("scheme", "L", *t.columns):
            table.add_column(escape(str(c)), justify="left" if c == "scheme" else "right")
        for (label, L), row in t.iterrows():
            table.add_row(escape(str(label)), str(L), *[escape(str(v)) for v in row.tolist()])
        console.print(table)


def _print_run_table(run_path: Path, split: str, task: str = "lm") -> None:
    from pe_bench.report import collect_all
    from pe_bench.runs import Run

    if task != "lm":
        from pe_bench.task_report import collect_accuracy

        acc = collect_accuracy([Run(run_path)])
        for line in acc.left_out:
            warn(f"left out: {line}")
        if not acc.df.empty:
            _print_accuracy_tables(acc)
        return
    col = collect_all([Run(run_path)])
    for line in col.left_out:
        warn(f"left out: {line}")
    if not col.df.empty:
        _print_tables(col, split)


@app.command(epilog=presets_help())
@friendly
def train(overrides: list[str] | None = typer.Argument(None, metavar="KEY=VALUE", help=OVERRIDES_HELP),
          progress: bool = typer.Option(True, help="Show the progress bar (off: plain log lines)."),
          cfg_only: bool = typer.Option(False, "--cfg", help="Print the resolved config (YAML) and the run "
                                        "directory, then exit; runs nothing.")) -> None:
    """Train one run and evaluate it at every eval length (resumes from its checkpoint if interrupted)."""
    _train(overrides or [], progress, cfg_only)


@app.command()
@friendly
def finetune(run_dir: Path = typer.Argument(..., help="The parent: a finished run directory (results/runs/<name>)."),
             overrides: list[str] | None = typer.Argument(None, metavar="KEY=VALUE",
                                                         help="train.*, eval.*, the scheme's eval-time options "
                                                         "(scheme.scaling.*), finetune.new_positions."),
             progress: bool = typer.Option(True, help="Show the progress bar (off: plain log lines)."),
             cfg_only: bool = typer.Option(False, "--cfg", help="Print the resolved config (YAML) and the run "
                                           "directory, then exit; runs nothing.")) -> None:
    """Fine-tune a finished run from its final weights, e.g. at 8L with YaRN: `pe-bench finetune RUN_DIR
    train.seq_len=512 train.steps=200 scheme.scaling.type=yarn scheme.scaling.factor=8`, or with PoSE at the
    parent's L: `train.seq_len=64 train.batch_size=32 train.pose_target=512`. The recipe is train=finetune (4 × 512
    tokens per step, 100 steps, lr 5e-4) unless overridden; the new run lies beside its parent, named after it, and is
    evaluated at its parent's eval lengths and its own L unless eval.* says otherwise (`pe-bench train
    finetune.from_run=RUN_DIR ...` is the same)."""
    from pe_bench.config import hydra_quoted

    _train([f"finetune.from_run={hydra_quoted(str(run_dir))}", *(overrides or [])], progress, cfg_only)


def _train(overrides: list[str], progress: bool, cfg_only: bool) -> None:
    cfg = compose_run(overrides, scheme=False)  # configuration errors first, before torch is imported
    if cfg.finetune.from_run:
        from pe_bench.finetune import warmup_warning

        if line := warmup_warning(cfg):
            warn(line)
    if cfg_only:
        _print_cfg(cfg)
        return
    from pe_bench.config import check_scheme
    from pe_bench.distributed import stop_on_signals
    from pe_bench.experiment import run_one

    check_scheme(cfg)  # the scheme's options, built once for the model's shape
    stop_on_signals()  # SIGTERM/SIGUSR1 (kill, Slurm near its time limit): checkpoint at the next step, exit 3
    run = run_one(cfg, progress=progress)
    if int(os.environ.get("RANK", "0")) != 0:  # under torchrun, rank 0 reports for the run
        return
    _print_run_table(run.path, cfg.eval.split, cfg.task.name)
    meta = run.meta()
    say(f"run: {run.path}  ({meta.get('train_tokens_per_s', 0):,} tok/s train)")


def _trained_run(run_dir: Path, overrides: list[str] | None):
    """(run, the config it was trained with, that config with eval.* and eval-time scheme overrides) of a trained
    run directory; anything else is one ConfigError line."""
    from pe_bench.runs import Run, RunBusy

    run = Run(run_dir)
    if run.config.exists() and not run.checkpoint.exists() and run.is_locked():  # training, before its first one
        raise RunBusy(f"{run_dir} is being trained by another process and has no checkpoint yet")
    if not run.config.exists() or not run.checkpoint.exists():
        raise ConfigError(f"{run_dir} is not a trained run directory (needs config.yaml and checkpoint.pt); "
                          "train one with `pe-bench train`")
    saved = run.load_config()
    return run, saved, apply_overrides(saved, overrides or [], allowed=("eval", "scheme", "attention"))


@app.command("eval")
@friendly
def eval_cmd(run_dir: Path = typer.Argument(..., help="A run directory (results/runs/<name>)."),
             overrides: list[str] | None = typer.Argument(
                 None, metavar="KEY=VALUE",
                 help="eval.* overrides and the scheme's eval-time options, e.g. eval.lengths=[64,1024] "
                      "scheme.scaling.type=yarn scheme.scaling.factor=8"),
             partial: bool = typer.Option(False, "--partial", help="Evaluate an unfinished run's last checkpoint; "
                                          "every row records the step its weights come from."),
             progress: bool = typer.Option(True, help="Show the progress bars (off: plain log lines)."),
             cfg_only: bool = typer.Option(False, "--cfg", help="Print the config the evaluation would use (the "
                                           "run's, with these overrides) and exit.")) -> None:
    """Re-evaluate a saved run at other lengths or with eval-time scheme options (RoPE context extension, the
    learned table's policy), without retraining. Rows are added to the run's eval.csv under the variant's label,
    beside rows of other evaluation settings."""
    run, saved, cfg = _trained_run(run_dir, overrides)
    if cfg_only:
        typer.echo(to_yaml(cfg).rstrip())
        return
    from pe_bench.distributed import stop_on_signals
    from pe_bench.experiment import check_eval_overrides, check_same_run, evaluate_run

    check_eval_overrides(saved, cfg)
    if any(o.lstrip("+~").startswith("scheme") and not o.lstrip("+~").startswith("scheme.eval_variants")
           for o in overrides or []):
        cfg.eval.variants = False  # the user asked for one variant (e.g. rope+yarn×8): evaluate just that one
    stop_on_signals()  # SIGTERM/SIGUSR1: stop before the next length, exit 3, as during train
    with run.lock():  # a run being trained (or evaluated) by another process is left alone: exit 4
        meta = run.meta()
        if meta.get("status") != "done" and not partial:
            at = meta.get("checkpoint_step")
            where = f", checkpoint at step {at} of {saved.train.steps}" if at is not None else ""
            raise ConfigError(f"{run_dir} is not finished (status {meta.get('status', 'unknown')}{where}): finish it "
                              "with its `pe-bench train` command, or pass --partial to evaluate the checkpoint as "
                              "it is (each row records its step)")
        check_same_run(run, saved)
        evaluate_run(run, cfg, trained=saved, progress=progress)
    _print_run_table(run.path, cfg.eval.split, saved.task.name)
    say(f"updated {run.eval_csv if saved.task.name == 'lm' else run.accuracy_csv}")


@app.command()
@friendly
def analyze(run_dir: Path = typer.Argument(..., help="A run directory (results/runs/<name>), any task."),
            overrides: list[str] | None = typer.Argument(
                None, metavar="KEY=VALUE", help="eval.* overrides (e.g. eval.lengths=[64,512]) and the scheme's "
                "eval-time options (e.g. scheme.scaling.type=yarn scheme.scaling.factor=8)"),
            examples: int = typer.Option(16, min=1, help="Inputs per length: text windows or held-out examples."),
            buckets: int = typer.Option(32, min=1, help="Query-position buckets per length."),
            out: Path | None = typer.Option(None, help="Where attention.csv/.png go (default: RUN_DIR/analysis).")
            ) -> None:
    """Attention diagnostics at every eval length: per layer and head, attention entropy, mean attended distance
    and the mass on the first token, by query position — e.g. whether a scheme's heads go diffuse past L. Writes
    attention.csv and attention.png."""
    run, saved, cfg = _trained_run(run_dir, overrides)
    from pe_bench.analyze import analyze as attention_stats
    from pe_bench.analyze import default_title, summary_lines
    from pe_bench.publish import write_analysis
    from pe_bench.build import build_scheme
    from pe_bench.config import scheme_spec
    from pe_bench.device import resolve_device
    from pe_bench.evaluate import reference_length, run_lengths
    from pe_bench.experiment import check_eval_overrides, check_same_run, load_data
    from pe_bench.train import load_trained

    check_eval_overrides(saved, cfg)
    check_same_run(run, saved)
    if run.meta().get("status") != "done":
        warn(f"{run_dir} is not finished: analysing its last checkpoint")
    device = resolve_device(cfg.train.device)
    data = load_data(cfg)
    spec = scheme_spec(cfg.scheme)
    model, step = load_trained(run, cfg, device, spec, data, saved)
    rows = attention_stats(model, cfg, data, device, examples, buckets, step)
    label = build_scheme(cfg, spec).label()
    suffix = "" if label == saved.scheme["name"] else "-" + "".join(c if c.isalnum() else "_" for c in label)
    made_at = {"step": step, "steps": saved.train.steps, "run_status": run.meta().get("status")}
    written = write_analysis(rows, out or run.path / f"analysis{suffix}",
                             default_title(cfg, label, max(run_lengths(cfg))) + (
                                 f" (step {step}/{saved.train.steps})" if step != saved.train.steps else ""), made_at)
    for line in summary_lines(rows, reference_length(cfg)):
        say(line)
    for p in written:
        say(f"wrote {p}")


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
          progress: bool = typer.Option(True, help="Show progress bars.")) -> None:
    """Train and evaluate every point of a sweep, then write its report (tables, long CSV, plots). The default
    sweep is every registered scheme × 2 seeds. Finished points are skipped; interrupted ones resume from their
    checkpoint; a failing point is recorded in its run directory and never stops the others."""
    from pe_bench import launchers
    from pe_bench.sweep import expand, load_sweep, plan, report_dir, split_overrides

    name, sweep_keys, run_keys = split_overrides(overrides or [])
    sw = load_sweep(name, sweep_keys)
    sw.launcher = launcher or sw.launcher
    sw.local.parallel = parallel or sw.local.parallel
    sw.slurm.wait = sw.slurm.wait if wait is None else wait
    sw.out = str(out) if out else sw.out
    if sw.launcher not in ("local", "slurm"):
        raise ConfigError(f"--launcher {sw.launcher!r} is not one of: local, slurm")
    if parallel is not None and parallel < 1:
        raise ConfigError(f"--parallel {parallel}: give at least 1 (the number of processes at once)")
    command = f"pe-bench sweep {' '.join(overrides or [])}".strip()
    run_with = launchers.for_sweep(sw, command, emit_sbatch, progress)
    t0 = time.perf_counter()
    points = plan(expand(sw, run_keys))
    results = _run_stage(points, sw, sw.name, run_with, dry_run)
    if dry_run and sw.extension is not None:  # the fine-tunes of the parents that are finished already
        from pe_bench.sweep import finetune_points

        children = finetune_points(sw, [p for p in points if p.state == "done"])
        if children:
            _run_stage(children, sw, f"{sw.name}: fine-tuning", run_with, dry_run)
        if len(children) < len(points) * sum(n > 0 for n in sw.extension.steps) * len(sw.extension.methods):
            say("the fine-tunes of unfinished parents are planned once their parents are done")
    if results is None:  # a dry run, or handed to a scheduler: the next `pe-bench sweep` (or `pe-bench report`) goes on
        return
    if sw.extension is not None:  # the fine-tuning stage, from the parents that are finished
        from pe_bench.extension import evaluate_baselines
        from pe_bench.sweep import finetune_points, inspect

        parents = [p for p in map(inspect, points) if p.state == "done"]
        if len(parents) < len(points):
            warn(f"{len(points) - len(parents)} of {len(points)} parents are not finished: their fine-tunes wait for "
                 "them (run the same command again once they are)")
        if run_with.trains_here:
            evaluate_baselines(sw, parents, say)
        children = finetune_points(sw, parents)
        more = _run_stage(children, sw, f"{sw.name}: fine-tuning", run_with, dry_run) if children else {}
        if more is None:
            return
        points, results = points + children, {**results, **more}
    _finish_sweep(points, results, report_dir(sw, points), command, time.perf_counter() - t0)


def _run_stage(points, sw, name: str, run_with, dry_run: bool) -> dict[str, str] | None:
    """Plan, estimate and launch the points to do; their results, or None when nothing more happens here (a dry
    run, a script emitted, an array handed to Slurm)."""
    from pe_bench import launchers
    from pe_bench.sweep import TODO, check_data

    _print_plan(points, name)
    _print_estimate(points, sw)
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


def _finish_sweep(points, results: dict[str, str], out: Path, title: str, seconds: float) -> None:
    """Summary table of every point, the report of the finished ones, the counts; exit 1 if any point failed."""
    from pe_bench.evaluate import eval_lengths, run_lengths
    from pe_bench.report import MODES, collect_all, collect_positions

    def lengths_of_parent(cfg) -> set[int]:  # a fine-tune's evaluation at its parent's lengths
        return set(eval_lengths(cfg.eval, cfg.finetune.original_seq_len))
    from pe_bench.sweep import BUSY, LEFT, inspect

    skipped = sum(p.state == "done" for p in points)  # as planned, before the states are read again
    busy = sum(p.state in BUSY for p in points)
    left = sum(p.state in LEFT for p in points)  # diverged before, or an unreadable run directory: failures
    summary = Table(title="runs", header_style="bold")
    for c in ("run", "status", "train tok/s", "wall s", "error"):
        summary.add_column(c)
    for p in points:
        inspect(p)
        meta = p.meta
        status = results.get(p.label, "skipped" if p.state == "done" else p.state)
        if status == "failed" and meta.get("status") == "diverged":
            status = "diverged"
        summary.add_row(escape(p.run.path.name), escape(status), f"{meta.get('train_tokens_per_s', '')}",
                        f"{meta.get('wall_seconds', '')}", escape(str(meta.get("error") or p.detail * (p.state in LEFT))))
    console.print(summary)
    runs = [p.run for p in points if p.state == "done" or p.state == "diverged"]
    task_runs = [p.run for p in points if p.cfg.task.name != "lm" and p.run in runs]
    if task_runs:
        _report_tasks(task_runs, out, plots=True, title=title)
    runs = [r for r in runs if r not in task_runs]
    # this sweep's lengths and evaluation settings only, even if a run was also evaluated elsewhere
    wanted: dict[str, set[tuple[int, str, str]]] = {}  # run → (length, mode, token budget) this sweep evaluates
    for p in points:
        e = p.cfg.eval
        keys = {(n, m, str(e.max_tokens if m == "nonoverlapping" else e.sliding_max_tokens))
                for n in run_lengths(p.cfg) for m in MODES}
        wanted.setdefault(p.run.path.name, set()).update(keys)
        if p.cfg.finetune.from_run:  # its budget 0: the parent evaluated with the fine-tune's settings
            wanted.setdefault(Path(p.cfg.finetune.from_run).name, set()).update(
                (n, m, b) for n, m, b in keys if n in lengths_of_parent(p.cfg))

    def ours(df):
        return [(int(n), m, str(b)) in wanted.get(r, ()) for r, n, m, b in zip(df["run"], df["L_eval"], df["mode"],
                                                                               df["budget"])]

    col = collect_all(runs, keep=ours) if runs else None
    for line in col.left_out if col is not None else []:
        warn(f"left out of the report: {line}")
    if col is not None and not col.df.empty:
        pos = collect_positions(runs, unplotted := [])
        for line in unplotted:
            warn(f"left out of the plots: {line}")
        split = points[0].cfg.eval.split
        _print_tables(col, split)
        _write_report(col, pos, out, title, split, MODES, plots=True)
    counts = {k: sum(v == k for v in results.values()) for k in ("trained", "failed", "busy", "stopped")}
    counts["failed"] += left
    say(f"{len(points)} points: {counts['trained']} trained, {skipped} skipped (finished before), "
                  f"{counts['failed']} failed, {counts['busy'] + busy} busy "
                  f"elsewhere, {counts['stopped']} stopped, in {seconds:.0f} s")
    if counts["failed"]:
        raise typer.Exit(1)


def _find_runs(paths: list[str]) -> list[Path]:
    """Run directories from run dirs, results dirs (holding runs/), directories of runs, or glob patterns."""
    import glob

    def is_run(d: Path) -> bool:
        return d.is_dir() and any((d / f).exists() for f in ("eval.csv", "meta.json"))

    found: list[Path] = []
    for p in paths:
        matches = [Path(m) for m in sorted(glob.glob(p))] or [Path(p)]
        for m in matches:
            if is_run(m):
                found.append(m)
            elif m.is_dir():
                base = m / "runs" if (m / "runs").is_dir() else m
                found += sorted(d for d in base.iterdir() if is_run(d))
    unique = list(dict.fromkeys(p.resolve() for p in found))
    if not unique:
        raise ConfigError(f"no evaluated run directories under {' '.join(paths)}; pass run directories, a results "
                          "directory (with runs/), or a glob like 'results/runs/rope-*'")
    return unique


@app.command()
@friendly
def report(paths: list[str] = typer.Argument(..., help="Run directories, results directories, or globs."),
           out: Path = typer.Option(Path("results/report"), help="Where tables and plots are written."),
           data: list[str] | None = typer.Option(None, help="Keep only these data presets (repeatable)."),
           model: list[str] | None = typer.Option(None, help="Keep only these model presets (repeatable)."),
           seq_len: list[int] | None = typer.Option(None, "--L", help="Keep only these training lengths."),
           scheme: list[str] | None = typer.Option(None, help="Keep only these scheme rows (repeatable)."),
           mode: list[str] | None = typer.Option(None, help="Modes to tabulate: nonoverlapping, sliding."),
           split: str = typer.Option("validation", help="Evaluation split."),
           compare: tuple[str, str] | None = typer.Option(None, "--compare", metavar="A B",
                                                          help="Paired difference ppl(A) − ppl(B) at each length, "
                                                          "with its 95% interval, e.g. --compare alibi rope."),
           partial: bool = typer.Option(False, "--partial", help="With --compare: also compare the rows of "
                                        "`pe-bench eval --partial` (an unfinished run's step, labelled)."),
           plots: bool = typer.Option(True, help="Write PNG plots (needs matplotlib: pip install '.[plots]').")
           ) -> None:
    """Tables and plots from many runs: eval_long.csv (every row), comparison.csv/.md (one row per configuration:
    mean ± std over seeds, a 95% interval, the number of seeds; bold: not distinguishable from the best),
    ppl_vs_length_<mode>.png and loss_vs_position.png. Unreadable or unfinished run directories are left out, each
    named. Same inputs, same bytes."""
    from pe_bench.report import MODES, collect_all, collect_positions
    from pe_bench.report import compare as paired
    from pe_bench.runs import Run

    from pe_bench.task_report import is_task_run

    runs = [Run(p) for p in _find_runs(paths)]
    task_runs = [r for r in runs if is_task_run(r)]
    if task_runs:
        _report_tasks(task_runs, out, plots)
        runs = [r for r in runs if r not in task_runs]
        if not runs:
            return
    col, pos = collect_all(runs), collect_positions(runs, unplotted := [])
    for line in col.left_out:
        warn(f"left out: {line}")
    for line in unplotted:
        warn(f"left out of the plots: {line}")
    df = col.df
    if df.empty:
        raise ConfigError(f"no usable evaluation rows in {len(runs)} run directories ({len(col.left_out)} left "
                          "out, above)")
    filters = {"data": data, "model": model, "L_train": seq_len, "scheme": scheme}
    for column, keep in filters.items():
        if keep:
            df = df[df[column].isin(keep)]
            pos = pos[pos[column].isin(keep)] if not pos.empty and column in pos else pos
    modes = mode or list(MODES)
    bad = [m for m in modes if m not in MODES]
    if bad:
        raise ConfigError(f"--mode {bad[0]!r} is not one of: {', '.join(MODES)}")
    df = df[df["mode"].isin(modes)] if not df.empty else df
    if df.empty:
        raise ConfigError("no evaluation rows left after the filters; loosen --data/--model/--L/--scheme/--mode")
    col.df = df
    if compare:
        t = paired(col, compare[0], compare[1], split, modes, partial)
        for line in t.attrs.get("left_out", []):
            warn(f"not compared: {line}")
        table = Table(title=f"paired difference ppl({compare[0]}) − ppl({compare[1]}) on {split}, 95% interval",
                      header_style="bold")
        for c in t.columns:
            table.add_column(escape(str(c)), justify="left" if c in ("mode", "config", "verdict") else "right")
        for row in t.itertuples(index=False):
            table.add_row(*[escape(str(v)) for v in row])
        console.print(table)
        return
    _print_tables(col, split)
    _write_report(col, pos, out, f"pe-bench report: {len(runs) - len(col.left_out)} runs", split, modes, plots)
    if col.left_out:
        warn(f"{len(col.left_out)} run directories left out (named above); the report holds the other "
                  f"{len(runs) - len(col.left_out)}")


def _report_tasks(runs, out: Path, plots: bool, title: str | None = None) -> None:
    """The accuracy tables and plots of task runs (left-out runs named): printed and written under ``out``."""
    from pe_bench.publish import write_accuracy_report
    from pe_bench.task_report import collect_accuracy

    acc = collect_accuracy(runs)
    for line in acc.left_out:
        warn(f"left out: {line}")
    if acc.df.empty:
        raise ConfigError(f"no usable accuracy rows in {len(runs)} task run directories ({len(acc.left_out)} left "
                          "out, above)")
    _print_accuracy_tables(acc)
    title = title or f"pe-bench report: {len(runs) - len(acc.left_out)} task runs"
    try:
        written = write_accuracy_report(acc, out, title, plots)
    except ImportError:
        written = write_accuracy_report(acc, out, title, plots=False)
        warn("plots skipped: matplotlib is not installed (pip install 'pe-bench[plots]')")
    for p in written:
        say(f"wrote {p}")


def _write_report(df, pos, out: Path, title: str, split: str, modes, plots: bool) -> None:
    from pe_bench.publish import write_report

    try:
        written = write_report(df, pos, out, title, split, modes, plots)
    except ImportError:
        written = write_report(df, pos, out, title, split, modes, plots=False)
        warn("plots skipped: matplotlib is not installed (pip install 'pe-bench[plots]')")
    for p in written:
        say(f"wrote {p}")


@app.command("schemes")
def list_schemes() -> None:
    """List the registered positional schemes, one line each: name, where it acts, what it is, citation
    (scheme=NAME picks one; configs/scheme/NAME.yaml holds its options)."""
    width = max(len(n) for n in schemes.catalog())
    for entry in schemes.catalog().values():
        where = "+".join(entry.acts_on) or "-"
        typer.echo(f"{entry.name:<{width}} {where:<14} {entry.description}  [{entry.citation}]")


def main() -> None:
    app()


if __name__ == "__main__":
    sys.exit(main())
