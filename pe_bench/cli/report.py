"""`pe-bench report`: tables and plots from many runs (perplexity, accuracy, fine-tuning by budget)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.markup import escape
from rich.table import Table

from pe_bench.cli.app import app, command_line, console, friendly, warn
from pe_bench.cli.output import Reported, print_tables, report_into, report_tasks, write_pages, write_report
from pe_bench.cli.output import find_runs as _find_runs
from pe_bench.config import ConfigError

if TYPE_CHECKING:  # pandas and the report are imported when a report is made: help answers without them
    import pandas as pd


@app.command()
@friendly
def report(ctx: typer.Context,
           paths: list[str] = typer.Argument(..., help="Run directories, results directories, or globs."),
           out: Path = typer.Option(Path("results/report"), help="Where tables and plots are written."),
           data: list[str] | None = typer.Option(None, help="Keep only these data presets (repeatable)."),
           model: list[str] | None = typer.Option(None, help="Keep only these model presets (repeatable)."),
           seq_len: list[int] | None = typer.Option(None, "--L", help="Keep only these training lengths."),
           scheme: list[str] | None = typer.Option(None, help="Keep only these scheme rows (repeatable)."),
           steps: list[int] | None = typer.Option(None, help="Keep only runs trained for these many steps "
                                                  "(repeatable): one token budget of a curve."),
           mode: list[str] | None = typer.Option(None, help="Modes to tabulate: nonoverlapping, sliding."),
           split: str = typer.Option("validation", help="Evaluation split."),
           compare: tuple[str, str] | None = typer.Option(None, "--compare", metavar="A B",
                                                          help="Paired difference ppl(A) − ppl(B) at each length, "
                                                          "with its 95% interval, e.g. --compare alibi rope; for "
                                                          "task runs acc(A) − acc(B) on the same held-out examples "
                                                          "(McNemar with one seed, t over seeds with several)."),
           partial: bool = typer.Option(False, "--partial", help="With --compare: also compare the rows of "
                                        "`pe-bench eval --partial` (an unfinished run's step, labelled)."),
           plots: bool = typer.Option(True, help="Write PNG plots (needs matplotlib: pip install '.[plots]')."),
           wide: bool = typer.Option(False, "--wide", help="Print every column and the 95% intervals (the files "
                                     "always have them); default: mean ± std within 120 columns.")
           ) -> None:
    """Tables and plots from many runs: eval_long.csv (every row), comparison.csv/.md (one row per configuration:
    mean ± std over seeds, a 95% interval, the number of seeds; bold: the best, where paired tests separate it from every other row),
    ppl_vs_length_<mode>.png and loss_vs_position.png, README.md and index.html (the command, the runs' time and
    environment, the tables, the figures) and results.json (every table as data, with versions and the command).
    Unreadable or unfinished run directories are left out, each named. Same inputs, same bytes. The console shows
    mean ± std within 120 columns (--wide: the intervals too)."""
    from pe_bench.report import collect_runs
    from pe_bench.report import compare as paired
    from pe_bench.runs import Run

    got = collect_runs([Run(p) for p in _find_runs(paths)], split=split)
    if compare and not got.accuracy.df.empty and (got.perplexity.df.empty or _has_rows(got.accuracy.df, compare)):
        _print_accuracy_comparison(got.accuracy, compare)
        return
    filters = {"data": data, "model": model, "L_train": seq_len, "scheme": scheme, "steps": steps}
    if compare:
        col, _, modes = _rows(got, filters, mode)
        _print_comparison(paired(col, compare[0], compare[1], split, modes, partial), compare, split)
        return
    with report_into(out) as reported:
        _report(ctx, got, reported, split, plots, wide, filters, mode)


def _title(runs: int) -> str:
    """A report's title: how many runs it holds."""
    return f"pe-bench report: {runs} run{'s' * (runs != 1)}"


def _rows(got, filters: dict[str, list | None], mode: list[str] | None, plots: bool = False):
    """(the language-model rows, their loss-by-position rows, the modes) that the filters keep; every run left out
    is named (and, with ``plots``, every curve left out of the plots). No rows left → ConfigError."""
    from pe_bench.report import collect_positions

    runs = got.runs["perplexity"]
    col, pos = got.perplexity, collect_positions(runs, unplotted := [])
    for line in [f"left out: {x}" for x in col.left_out] + [f"left out of the plots: {x}" for x in unplotted * plots]:
        warn(line)
    if col.df.empty:
        raise ConfigError(f"no usable evaluation rows in {len(runs)} run directories ({len(col.left_out)} left "
                          "out, above)")
    col.df, pos, modes = _filtered(col.df, pos, filters, mode)
    kept = set(col.df["config"])  # the position-gain and repetition rows follow the configurations kept
    col.context, col.repetition = (t[t["config"].isin(kept)] if "config" in t else t
                                   for t in (col.context, col.repetition))
    return col, pos, modes


def _report(ctx, got, reported: Reported, split: str, plots: bool, wide: bool, filters: dict,
            mode: list[str] | None) -> None:
    """The parts of a report, each written into the staging folder ``reported.stage``: the task runs', the language
    model runs', then the pages."""
    if got.runs["accuracy"]:
        reported += _report_tasks(got, reported.stage, plots, split)
        if not got.runs["perplexity"]:
            write_pages(reported.stage, _title(len(reported.meta)), command_line(ctx), reported)
            return
    col, pos, modes = _rows(got, filters, mode, plots)
    held = col.df["run"].nunique()  # the runs with rows after the filters, not every run read
    print_tables(col, split, wide)
    reported += write_report(col, pos, reported.stage, _title(held), split, modes, plots)
    write_pages(reported.stage, _title(len(reported.meta)), command_line(ctx), reported)
    if col.left_out:
        warn(f"{len(col.left_out)} run directories left out (named above); the report holds {held}")


def _filtered(df: pd.DataFrame, pos: pd.DataFrame, filters: dict[str, list | None],
              mode: list[str] | None) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """The rows (and loss-by-position rows: those of the runs kept) that the --data/--model/--L/--scheme/--steps
    filters keep, in the modes asked for (default: both); the modes."""
    from pe_bench.report import MODES

    for column, keep in filters.items():
        if keep:
            df = df[df[column].isin(keep)]
            pos = pos[pos[column].isin(keep)] if not pos.empty and column in pos else pos
    pos = pos[pos["run"].isin(set(df["run"]))] if not pos.empty else pos
    modes = mode or list(MODES)
    bad = [m for m in modes if m not in MODES]
    if bad:
        raise ConfigError(f"--mode {bad[0]!r} is not one of: {', '.join(MODES)}")
    df = df[df["mode"].isin(modes)] if not df.empty else df
    if df.empty:
        raise ConfigError("no evaluation rows left after the filters; loosen --data/--model/--L/--scheme/--steps/"
                          "--mode")
    return df, pos, modes


def _print_comparison(t: pd.DataFrame, compare: tuple[str, str], split: str) -> None:
    """The paired differences of ``--compare A B``, and the rows that could not be compared."""
    for line in t.attrs.get("left_out", []):
        warn(f"not compared: {line}")
    table = Table(title=f"paired difference ppl({compare[0]}) − ppl({compare[1]}) on {split}, 95% interval",
                  header_style="bold")
    for c in t.columns:
        table.add_column(escape(str(c)), justify="left" if c in ("mode", "config", "verdict") else "right")
    for row in t.itertuples(index=False):
        table.add_row(*[escape(str(v)) for v in row])
    console.print(table)


def _report_tasks(got, out: Path, plots: bool, split: str) -> Reported:
    """The task runs' tables, leaderboard and plots; beside the effective lengths, the perplexity at the longest
    length over L of the language-model runs reported with them."""
    beside = None
    if not got.perplexity.df.empty:
        from pe_bench.report.leaderboard import perplexity_columns

        beside = perplexity_columns(got.perplexity, split)
    return report_tasks(got.accuracy, len(got.runs["accuracy"]), out, plots, beside=beside)


def _has_rows(df: pd.DataFrame, names: tuple[str, str]) -> bool:
    return all(n in set(df["label"]) for n in names)


def _print_accuracy_comparison(acc, compare: tuple[str, str]) -> None:
    """``--compare A B`` on task runs: acc(A) − acc(B) per task and length, paired over the same held-out examples,
    the rows that could not be compared, and one verdict line per task."""
    from pe_bench.report.accuracy import compare_accuracy, verdict_lines

    for line in acc.left_out:
        warn(f"left out: {line}")
    t = compare_accuracy(acc, *compare)
    for line in t.attrs.get("left_out", []):
        warn(f"not compared: {line}")
    table = Table(title=escape(f"paired difference of exact match acc({compare[0]}) − acc({compare[1]}) in points, "
                               "on the same held-out examples, 95% interval"), header_style="bold")
    for c in t.columns:
        table.add_column(escape(str(c)), justify="left" if c in ("task", "method", "verdict") else "right")
    for row in t.itertuples(index=False):
        table.add_row(*[escape(str(v)) for v in row])
    console.print(table)
    for line in verdict_lines(t, *compare):
        console.print(escape(f"verdict: {line}"))