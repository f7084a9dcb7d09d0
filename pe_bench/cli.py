"""pe-bench command line: train, eval, sweep, schemes. Thin: parse, compose, call."""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from pe_bench import schemes
from pe_bench.config import ConfigError, apply_overrides, compose, from_yaml
from pe_bench.data import DataError

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="Train small transformers at length L with a positional scheme; evaluate at L, 2L, 4L, 8L.")
# Off a terminal (logs, CI) rich would assume 80 columns and truncate numbers; tables are never cut.
console = Console(highlight=False, width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True)

OVERRIDES_HELP = "Hydra overrides, e.g. scheme=rope model.n_layers=2 train=smoke eval.lengths=[64,128]"


def friendly(fn: Callable) -> Callable:
    """Bad input → one line and exit 2; a crash → one line and exit 1 (PE_BENCH_DEBUG=1 shows the traceback)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (ConfigError, DataError) as e:
            err.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None
        except KeyboardInterrupt:
            err.print("interrupted: run the same command again to resume from the last checkpoint")
            raise typer.Exit(130) from None
        except typer.Exit:
            raise
        except Exception as e:
            if os.environ.get("PE_BENCH_DEBUG"):
                raise
            what = escape(f"{type(e).__name__}: {e}")
            err.print(f"[bold red]error:[/] {what} (PE_BENCH_DEBUG=1 shows the traceback)",
                      highlight=False, soft_wrap=True)
            raise typer.Exit(1) from None

    return wrapper


def _print_tables(df, split: str) -> None:
    from pe_bench.report import comparison, rich_table

    for mode in ("nonoverlapping", "sliding"):
        t = comparison(df, mode, split)
        if not t.empty:
            console.print(rich_table(t, f"perplexity on {split} — {mode} (columns: eval length)"))


def _print_run_table(run_path: Path, split: str) -> None:
    from pe_bench.report import collect
    from pe_bench.runs import Run

    _print_tables(collect([Run(run_path)]), split)


@app.command()
@friendly
def train(overrides: list[str] | None = typer.Argument(None, metavar="KEY=VALUE", help=OVERRIDES_HELP),
          progress: bool = typer.Option(True, help="Show the progress bar.")) -> None:
    """Train one run and evaluate it at every eval length (resumes from its checkpoint if interrupted)."""
    from pe_bench.experiment import run_one

    cfg = compose(overrides or [])
    run = run_one(cfg, progress=progress)
    _print_run_table(run.path, cfg.eval.split)
    meta = run.meta()
    console.print(f"run: {run.path}  ({meta.get('train_tokens_per_s', 0):,} tok/s train, "
                  f"{meta.get('wall_seconds')} s wall)")


@app.command("eval")
@friendly
def eval_cmd(run_dir: Path = typer.Argument(..., help="A run directory (results/runs/<name>)."),
             overrides: list[str] | None = typer.Argument(
                 None, metavar="KEY=VALUE",
                 help="eval.* and scheme.* overrides, e.g. eval.lengths=[64,1024] scheme.scaling.type=yarn "
                      "scheme.scaling.factor=8")) -> None:
    """Re-evaluate a saved run at other lengths or with eval-time scheme options (RoPE context extension, the
    learned table's policy), without retraining. Rows are added to the run's eval.csv under the variant's label."""
    from pe_bench.experiment import evaluate_run
    from pe_bench.runs import Run

    run = Run(run_dir)
    if not run.config.exists() or not run.checkpoint.exists():
        raise ConfigError(f"{run_dir} is not a trained run directory (needs config.yaml and checkpoint.pt); "
                          "train one with `pe-bench train`")
    cfg = apply_overrides(from_yaml(run.config), overrides or [], allowed=("eval", "scheme"))
    if any(o.lstrip("+~").startswith("scheme") for o in overrides or []):
        cfg.eval.variants = False  # the user asked for one variant (e.g. rope+yarn×8): evaluate just that one
    evaluate_run(run, cfg)
    _print_run_table(run.path, cfg.eval.split)
    console.print(f"updated {run.eval_csv}")


@app.command()
@friendly
def sweep(overrides: list[str] | None = typer.Argument(
              None, metavar="KEY=VALUE", help=OVERRIDES_HELP + "; comma lists sweep (scheme=rope,alibi seed=0,1)"),
          progress: bool = typer.Option(True, help="Show progress bars.")) -> None:
    """Train and evaluate every point of a sweep (default: every registered scheme), then print and write the
    comparison table. Finished points are skipped; interrupted ones resume from their checkpoint."""
    from pe_bench.evaluate import eval_lengths
    from pe_bench.experiment import is_done, run_one
    from pe_bench.report import collect, write_tables
    from pe_bench.runs import Run, run_dir_for
    from pe_bench.sweep import expand

    points = expand(overrides or [])
    configs = [compose(p) for p in points]  # validate every point before training any
    t0 = time.perf_counter()
    runs, status = [], {"done": 0, "skipped": 0, "failed": 0}
    summary = Table(title="runs", header_style="bold")
    for c in ("run", "status", "train tok/s", "wall s"):
        summary.add_column(c)
    for i, (point, cfg) in enumerate(zip(points, configs), 1):
        run = Run(run_dir_for(cfg))
        label = " ".join(point)
        if is_done(run):
            status["skipped"] += 1
            console.print(escape(f"[{i}/{len(points)}] {label}: already done, skipped ({run.path})"))
        else:
            console.print(escape(f"[{i}/{len(points)}] {label}: training → {run.path}"))
            try:
                run_one(cfg, progress=progress)
                status["done"] += 1
            except (ConfigError, DataError):
                raise
            except Exception as e:  # noqa: BLE001 - a failing point never stops the others
                status["failed"] += 1
                err.print(escape(f"[{i}/{len(points)}] {label}: failed: {type(e).__name__}: {e}"), highlight=False)
        meta = run.meta()
        summary.add_row(run.path.name, meta.get("status", "?"), f"{meta.get('train_tokens_per_s', '')}",
                        f"{meta.get('wall_seconds', '')}")
        if run.eval_csv.exists():
            runs.append(run)
    console.print(summary)
    df = collect(runs)
    if not df.empty:  # this sweep's lengths only, even if a run was also evaluated elsewhere
        wanted = {run_dir_for(c).name: set(eval_lengths(c.eval, c.train.seq_len)) for c in configs}
        df = df[[n in wanted.get(r, ()) for r, n in zip(df["run"], df["L_eval"])]]
        split = configs[0].eval.split
        _print_tables(df, split)
        title = f"pe-bench sweep {' '.join(overrides or [])}".strip()
        for p in write_tables(df, Path(configs[0].results_dir), title, split):
            console.print(f"wrote {p}")
    console.print(f"{len(points)} points: {status['done']} trained, {status['skipped']} skipped, "
                  f"{status['failed']} failed in {time.perf_counter() - t0:.0f} s")
    if status["failed"]:
        raise typer.Exit(1)


def _find_runs(paths: list[str]) -> list[Path]:
    """Run directories from run dirs, results dirs (holding runs/), directories of runs, or glob patterns."""
    import glob

    found: list[Path] = []
    for p in paths:
        matches = [Path(m) for m in sorted(glob.glob(p))] or [Path(p)]
        for m in matches:
            if (m / "eval.csv").exists():
                found.append(m)
            elif m.is_dir():
                base = m / "runs" if (m / "runs").is_dir() else m
                found += sorted(d for d in base.iterdir() if (d / "eval.csv").exists())
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
           plots: bool = typer.Option(True, help="Write PNG plots (needs matplotlib: pip install '.[plots]').")
           ) -> None:
    """Tables and plots from many runs: eval_long.csv (every row), comparison.csv/.md (mean ± std over seeds, the
    number of seeds), ppl_vs_length_<mode>.png and loss_vs_position.png. Same inputs, same bytes."""
    from pe_bench.report import MODES, collect, collect_positions, plot_lengths, plot_positions, write_tables
    from pe_bench.runs import Run, atomic_write_text

    runs = [Run(p) for p in _find_runs(paths)]
    df, pos = collect(runs), collect_positions(runs)
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
    df = df.sort_values(["data", "model", "L_train", "scheme", "seed", "split", "mode", "L_eval"], kind="stable")
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "eval_long.csv", df.to_csv(index=False))
    written = [out / "eval_long.csv"]
    title = f"pe-bench report: {len(runs)} runs"
    _print_tables(df, split)
    written += write_tables(df, out, title, split)
    if plots:
        try:
            for m in modes:
                written.append(plot_lengths(df, out / f"ppl_vs_length_{m}.png", m, split))
            written.append(plot_positions(pos, out / "loss_vs_position.png", split))
        except ImportError:
            err.print("plots skipped: matplotlib is not installed (pip install '.[plots]')")
    for p in written:
        if p is not None:
            console.print(f"wrote {p}")


@app.command("schemes")
def list_schemes() -> None:
    """List the registered positional schemes, one line each: name, where it acts, what it is, citation."""
    for name in schemes.available():
        cls = schemes.get(name)
        where = "+".join(cls.acts_on) or "-"
        typer.echo(f"{name:<12} {where:<14} {cls.description}  [{cls.citation}]")


def main() -> None:
    app()


if __name__ == "__main__":
    sys.exit(main())
